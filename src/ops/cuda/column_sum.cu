// Column sums in levels: each level sums blocks of kRowsPerBlock rows into one partial row, until
// one row remains, which is added into the output. A block is 32 column lanes (VEC columns each:
// one 16-byte load per row) x 8 row lanes; row lane y sums rows y, y+8, ... in order, then the 8
// row lanes are added in order through shared memory. The tree depends only on (R, C).
#include "ops/cuda/check.h"
#include "ops/cuda/column_sum.h"
#include "ops/cuda/kernel_util.cuh"

namespace pylon::cuda {
namespace {

using detail::align_up;
using detail::ceil_div;
constexpr int kRowLanes = 8;
constexpr int kRowsPerBlock = 128;

template <int VEC>
__device__ __forceinline__ void load_row(float (&v)[VEC], const float* p) { detail::load_f32<VEC>(v, p); }
template <int VEC>
__device__ __forceinline__ void load_row(float (&v)[VEC], const __nv_bfloat16* p) { detail::load_bf16<VEC>(v, p); }

// grid (row blocks, column tiles); out is (gridDim.x, C) partials, or the (C) result (+=) when
// accumulate (then gridDim.x == 1).
template <typename T, int VEC>
__global__ void __launch_bounds__(detail::kWarpSize * kRowLanes) column_sum_kernel(
    float* out, const T* in, int64_t R, int C, bool accumulate) {
  constexpr int kTile = detail::kWarpSize * VEC;
  __shared__ float lane_sums[kRowLanes][kTile];
  const int tx = threadIdx.x % detail::kWarpSize, ty = threadIdx.x / detail::kWarpSize;
  const int col = blockIdx.y * kTile + tx * VEC;
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock;
  const int64_t r1 = r0 + kRowsPerBlock < R ? r0 + kRowsPerBlock : R;
  float acc[VEC] = {};
  if (col < C) {
#pragma unroll 4
    for (int64_t r = r0 + ty; r < r1; r += kRowLanes) {
      float v[VEC];
      load_row<VEC>(v, in + r * C + col);
#pragma unroll
      for (int e = 0; e < VEC; ++e) acc[e] += v[e];
    }
  }
#pragma unroll
  for (int e = 0; e < VEC; ++e) lane_sums[ty][tx * VEC + e] = acc[e];
  __syncthreads();
  for (int t = threadIdx.x; t < kTile; t += blockDim.x) {
    const int c = blockIdx.y * kTile + t;
    if (c >= C) continue;
    float s = 0.f;
#pragma unroll
    for (int y = 0; y < kRowLanes; ++y) s += lane_sums[y][t];
    if (accumulate) {
      out[c] += s;
    } else {
      out[static_cast<int64_t>(blockIdx.x) * C + c] = s;
    }
  }
}

template <typename T>
void launch_level(float* out, const T* in, int64_t R, int C, bool accumulate, cudaStream_t stream) {
  constexpr int kVecWide = sizeof(T) == 2 ? 8 : 4;  // 16 bytes
  const bool vec = C % kVecWide == 0 && detail::aligned16(in);
  const int tile = detail::kWarpSize * (vec ? kVecWide : 1);
  const dim3 grid(static_cast<unsigned>(ceil_div(R, kRowsPerBlock)), static_cast<unsigned>(ceil_div(C, tile)));
  const int threads = detail::kWarpSize * kRowLanes;
  if (vec) {
    column_sum_kernel<T, kVecWide><<<grid, threads, 0, stream>>>(out, in, R, C, accumulate);
  } else {
    column_sum_kernel<T, 1><<<grid, threads, 0, stream>>>(out, in, R, C, accumulate);
  }
  PYLON_CUDA_CHECK_LAUNCH();
}

// Levels: R rows -> ceil(R/128) partial rows -> ... -> <= 128 rows -> added into out.
template <typename T>
void column_sum_levels(float* out, const T* in, int64_t R, int C, void* workspace, cudaStream_t stream) {
  if (R <= kRowsPerBlock) {
    launch_level(out, in, R, C, true, stream);
    return;
  }
  const int64_t partial_rows = ceil_div(R, kRowsPerBlock);
  float* partials = static_cast<float*>(workspace);
  launch_level(partials, in, R, C, false, stream);
  void* rest = static_cast<char*>(workspace) + align_up(sizeof(float) * partial_rows * C);
  column_sum_levels<float>(out, partials, partial_rows, C, rest, stream);
}

}  // namespace

size_t column_sum_workspace_bytes(int64_t R, int C) {
  size_t bytes = 0;
  for (int64_t rows = R; rows > kRowsPerBlock;) {
    rows = ceil_div(rows, kRowsPerBlock);
    bytes += align_up(sizeof(float) * static_cast<size_t>(rows) * static_cast<size_t>(C));
  }
  return bytes;
}

void column_sum_accumulate(float* out, const float* in, int64_t R, int C, void* workspace,
                           cudaStream_t stream) {
  if (R <= 0 || C <= 0) return;
  column_sum_levels(out, in, R, C, workspace, stream);
}

void column_sum_accumulate(float* out, const __nv_bfloat16* in, int64_t R, int C, void* workspace,
                           cudaStream_t stream) {
  if (R <= 0 || C <= 0) return;
  column_sum_levels(out, in, R, C, workspace, stream);
}

}  // namespace pylon::cuda

// Warpgroup-level tensor-core building blocks for Hopper (sm_90a): shared-memory tiles in the 128-byte
// swizzled layout that wgmma reads, filled by cp.async; their matrix descriptors; wgmma.mma_async
// wrappers (bf16 in, fp32 accumulate) and the fences around them.
//
// Swizzled tile: a (kRows, cols) bf16 tile, cols a multiple of 64, is stored as cols/64 column blocks of
// (kRows, 64) = kRows x 128 bytes each, 1024-byte aligned; within a block the 16-byte chunk c of row r
// sits at chunk c ^ (r % 8). wgmma reads such a tile K-major (contracting over its columns: q·kᵀ) or
// MN-major (contracting over its rows: p·v), so one layout serves q, k, v and dout in every product.
//
// Accumulators (m64nN, fp32), warp w of the warpgroup, lane = 4g + t: d[i][0..1] = (row 16w + g,
// cols 8i + 2t, +1), d[i][2..3] = (row 16w + 8 + g, same cols) -- the mma.m16n8k16 C layout over N/8
// column tiles. A register A operand takes the mma.m16n8k16 A layout for the warp's 16 rows, so
// mma::accum_to_a turns scores into the next product's left operand here too.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "ops/cuda/mma_sm80.cuh"

namespace pylon::cuda::wgmma {

using bf16 = __nv_bfloat16;

// Rows [row0, row0 + kRows) of a (rows, kCols) slice with global row stride `ld` elements into the
// swizzled tile at shared address `tile`; rows at or past n_rows are zero-filled.
template <int kRows, int kCols, int kThreads>
__device__ __forceinline__ void load_swizzled_tile_async(uint32_t tile, const bf16* src, int ld, int row0, int n_rows,
                                                         int tid) {
  constexpr int kChunksPerRow = kCols / 8;
  constexpr int kChunks = kRows * kChunksPerRow;
  static_assert(kCols % 64 == 0 && kRows % 8 == 0, "swizzled tiles are 8-row, 64-column blocks");
  static_assert(kChunks % kThreads == 0, "tile copy must split evenly over the block");
#pragma unroll
  for (int i = 0; i < kChunks / kThreads; ++i) {
    const int c = tid + i * kThreads;
    const int r = c / kChunksPerRow, chunk = c % kChunksPerRow;
    const bool valid = row0 + r < n_rows;
    const bf16* g = src + static_cast<int64_t>(valid ? row0 + r : 0) * ld + chunk * 8;
    const uint32_t dst = tile + (chunk / 8) * kRows * 128 + r * 128 + (((chunk % 8) ^ (r % 8)) * 16);
    mma::cp_async_16(dst, g, valid);
  }
}

// Matrix descriptor: start address, leading offset 16 B (unused by the shapes here: one 64-column block
// per MN-major operand), stride offset 1024 B between 8-row groups, 128-byte swizzle.
__device__ __forceinline__ uint64_t make_desc(uint32_t addr) {
  return static_cast<uint64_t>((addr & 0x3FFFF) >> 4) | (1ull << 16) | (64ull << 32) | (1ull << 62);
}
// K-major operand: rows from `row0` (a multiple of 8) of a kRows-row tile, columns 16ks..16ks+15. Inside
// a 128-byte row the k-step is a plain 32-byte offset: the hardware swizzles the final address.
template <int kRows>
__device__ __forceinline__ uint64_t desc_k_major(uint32_t tile, int row0, int ks) {
  return make_desc(tile + (ks / 4) * kRows * 128 + row0 * 128 + (ks % 4) * 32);
}
// MN-major operand: rows 16kk..16kk+15 (the contraction) of column block cb (64 columns) of a kRows tile.
template <int kRows>
__device__ __forceinline__ uint64_t desc_mn_major(uint32_t tile, int kk, int cb) {
  return make_desc(tile + cb * kRows * 128 + kk * 16 * 128);
}

// Orders this thread's cp.async (generic proxy) writes before wgmma's (async proxy) reads; then a barrier.
__device__ __forceinline__ void fence_async_proxy() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
__device__ __forceinline__ void fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Keeps the compiler from moving accumulator reads or writes across the asynchronous wgmma.
template <int M>
__device__ __forceinline__ void fence_accumulators(float (&d)[M][4]) {
#pragma unroll
  for (int i = 0; i < M; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) asm volatile("" : "+f"(d[i][j])::"memory");
}

// d (64 x 64) (+)= a (64 x 16, smem, K-major) · b (16 x 64, smem, K-major); accumulate = 0 overwrites d.
__device__ __forceinline__ void wgmma_m64n64k16_ss(float (&d)[8][4], uint64_t desc_a, uint64_t desc_b, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7,"
      "%8, %9, %10, %11, %12, %13, %14, %15,"
      "%16, %17, %18, %19, %20, %21, %22, %23,"
      "%24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]),
        "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]),
        "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]),
        "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3])
      : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}

// d (64 x 128) (+)= a (64 x 16, smem, K-major) · b (16 x 128, smem, K-major); accumulate = 0 overwrites d.
__device__ __forceinline__ void wgmma_m64n128k16_ss(float (&d)[16][4], uint64_t desc_a, uint64_t desc_b, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7,"
      "%8, %9, %10, %11, %12, %13, %14, %15,"
      "%16, %17, %18, %19, %20, %21, %22, %23,"
      "%24, %25, %26, %27, %28, %29, %30, %31,"
      "%32, %33, %34, %35, %36, %37, %38, %39,"
      "%40, %41, %42, %43, %44, %45, %46, %47,"
      "%48, %49, %50, %51, %52, %53, %54, %55,"
      "%56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]),
        "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]),
        "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]),
        "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3]),
        "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]), "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]),
        "+f"(d[10][0]), "+f"(d[10][1]), "+f"(d[10][2]), "+f"(d[10][3]), "+f"(d[11][0]), "+f"(d[11][1]), "+f"(d[11][2]), "+f"(d[11][3]),
        "+f"(d[12][0]), "+f"(d[12][1]), "+f"(d[12][2]), "+f"(d[12][3]), "+f"(d[13][0]), "+f"(d[13][1]), "+f"(d[13][2]), "+f"(d[13][3]),
        "+f"(d[14][0]), "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]), "+f"(d[15][0]), "+f"(d[15][1]), "+f"(d[15][2]), "+f"(d[15][3])
      : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}

// d (64 x 64) += a (64 x 16, registers) · b (16 x 64, smem, MN-major: one 64-column block, contracted
// over its rows).
__device__ __forceinline__ void wgmma_m64n64k16_rs_mn(float (&d)[8][4], const uint32_t (&a)[4], uint64_t desc_b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.eq.u32 p, 1, 1;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7,"
      "%8, %9, %10, %11, %12, %13, %14, %15,"
      "%16, %17, %18, %19, %20, %21, %22, %23,"
      "%24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]),
        "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]),
        "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]),
        "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b));
}
}  // namespace pylon::cuda::wgmma

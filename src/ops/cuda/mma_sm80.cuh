// Warp-level tensor-core building blocks (sm_80+, used on Hopper too): cp.async tile copies,
// ldmatrix operand loads and mma.sync m16n8k16 with bf16 inputs and fp32 accumulators.
//
// Fragment layouts (PTX ISA, "mma.m16n8k16"), lane = 4*g + t:
//   A (16x16, row-major), 4 regs of 2 bf16: a0 (row g, cols 2t..2t+1), a1 (row g+8, cols 2t..),
//                                           a2 (row g, cols 8+2t..),  a3 (row g+8, cols 8+2t..)
//   B (16x8, k-major),    2 regs:           b0 (k 2t..2t+1, col g),  b1 (k 8+2t.., col g)
//   C (16x8, fp32),       4 floats:         c0,c1 (row g, cols 2t, 2t+1), c2,c3 (row g+8, same cols)
// Shared-memory tiles are row-major with a row stride of (cols + 8) bf16: the extra 16 bytes put the
// 8 rows that one ldmatrix phase reads into 8 different bank groups.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>
#include <cstring>

namespace pylon::cuda::mma {

using bf16 = __nv_bfloat16;

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16-byte global -> shared copy that bypasses L1; when !valid nothing is read and zeros land.
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, bool valid) {
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes)
               : "memory");
}
// 4-byte variant (fp32 row statistics).
__device__ __forceinline__ void cp_async_4(uint32_t dst, const void* src, bool valid) {
  const int src_bytes = valid ? 4 : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// Rows [row0, row0 + kRows) of a (rows, kCols) slice with global row stride `ld` elements into a
// smem tile of stride kCols + 8; rows at or past `n_rows` are zero-filled. All kThreads take part.
template <int kRows, int kCols, int kThreads>
__device__ __forceinline__ void load_tile_async(bf16* tile, const bf16* src, int ld, int row0, int n_rows,
                                                int tid) {
  constexpr int kChunksPerRow = kCols / 8;  // 16-byte chunks
  constexpr int kChunks = kRows * kChunksPerRow;
  static_assert(kChunks % kThreads == 0, "tile copy must split evenly over the block");
#pragma unroll
  for (int i = 0; i < kChunks / kThreads; ++i) {
    const int c = tid + i * kThreads;
    const int r = c / kChunksPerRow, col = (c % kChunksPerRow) * 8;
    const bool valid = row0 + r < n_rows;
    const bf16* g = src + static_cast<int64_t>(valid ? row0 + r : 0) * ld + col;
    cp_async_16(smem_addr(tile + r * (kCols + 8) + col), g, valid);
  }
}

// kRows floats from src[row0..] into smem; entries at or past n_rows become 0.
template <int kRows, int kThreads>
__device__ __forceinline__ void load_row_stats_async(float* dst, const float* src, int row0, int n_rows,
                                                     int tid) {
  for (int r = tid; r < kRows; r += kThreads) {
    const bool valid = row0 + r < n_rows;
    cp_async_4(smem_addr(dst + r), src + (valid ? row0 + r : 0), valid);
  }
}

// Four 8x8 bf16 matrices; lanes 8i..8i+7 give the row addresses of matrix i, register i receives it.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// This lane's ldmatrix row address for a 16x16 block at (rows 0..15, cols col0..col0+15) of `tile`:
//  - as the A operand (ldmatrix_x4) of a row-major (m, k) tile, or
//  - as the B operands of two n-tiles (ldmatrix_x4_trans) of a (k, n) tile: regs {0,1} n-tile 0, {2,3} n-tile 1.
__device__ __forceinline__ uint32_t ldsm_addr_rows(const bf16* tile, int stride, int col0, int lane) {
  return smem_addr(tile + (lane & 15) * stride + col0 + (lane >> 4) * 8);
}
// This lane's address for the B operands of two n-tiles from an (n, k) tile (ldmatrix_x4, no trans):
// rows n 0..15, cols k col0..col0+15; regs {0,1} are n-tile 0 (rows 0-7), {2,3} n-tile 1 (rows 8-15).
__device__ __forceinline__ uint32_t ldsm_addr_cols(const bf16* tile, int stride, int col0, int lane) {
  return smem_addr(tile + ((lane & 7) + ((lane >> 4) << 3)) * stride + col0 + ((lane >> 3) & 1) * 8);
}

// d (16x8 fp32) += a (16x16 bf16) · b (16x8 bf16).
__device__ __forceinline__ void mma_bf16_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two floats as a bf16 pair, `lo` in the low half (the lower column of a fragment).
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  uint32_t u;
  memcpy(&u, &v, sizeof(u));
  return u;
}

// The accumulators of two adjacent 16x8 C tiles (columns 16kk..16kk+15) as one A operand (16x16):
// how a score tile in registers becomes the left operand of the next product.
__device__ __forceinline__ void accum_to_a(uint32_t (&a)[4], const float (&c0)[4], const float (&c1)[4]) {
  a[0] = pack_bf16(c0[0], c0[1]);
  a[1] = pack_bf16(c0[2], c0[3]);
  a[2] = pack_bf16(c1[0], c1[1]);
  a[3] = pack_bf16(c1[2], c1[3]);
}

// 2^x on the special-function unit (relative error ~2^-22; 2^-inf = 0).
__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

}  // namespace pylon::cuda::mma

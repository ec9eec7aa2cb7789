// Host side of TMA (tma_sm90.cuh): tensor maps that describe bf16 activations to cp.async.bulk.tensor.
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>

#include <cstdint>

namespace pylon::cuda {

// A (B, T, cols) row-major bf16 tensor as a 3-D tensor map (columns, rows, batch) read in boxes of
// (box_rows rows, 64 columns), 128-byte swizzled: the layout wgmma's K-major descriptors read
// (wgmma_sm90.cuh). Rows at or past T of each batch read as zeros. cols * 2 bytes must be a multiple of
// 16 and base 16-byte aligned. `who` names the caller in errors (pylon::Error).
CUtensorMap bf16_rows_tensor_map(const __nv_bfloat16* base, int64_t cols, int T, int B, int box_rows,
                                 const char* who);

}  // namespace pylon::cuda

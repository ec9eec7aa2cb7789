// A weight as the CPU decoder reads it: a pointer into its storage (a flat fp32 buffer or a mapped
// edge file) in the stored encoding (f32 / f16 / int8 / int4, layouts in ops/cpu/quantized.h), so a
// quantized model runs without a dequantized fp32 copy. Every linear layer goes through linear().
#pragma once

#include <cstdint>

#include "io/edge_format.h"

namespace pylon {

struct WeightView {
  EdgeDType dtype = EdgeDType::f32;
  int64_t rows = 0, cols = 0;              // (out, in); a 1-D tensor is one row
  const void* values = nullptr;            // f32: float, f16: uint16_t, int8: int8_t, int4: nibbles
  const void* scales = nullptr;            // int8: f32 (rows); int4: scale_dtype (rows, groups)
  EdgeDType scale_dtype = EdgeDType::f32;  // int4: f16 or f32
  int group_size = 0;                      // int4: columns per scale
};

// An fp32 view of rows x cols values at w.
WeightView f32_view(const float* w, int64_t rows, int64_t cols);

// y (n, W.rows) = x (n, W.cols) · Wᵀ + bias, bias (W.rows) fp32 or nullptr. f32 runs the BLAS GEMM
// of cpu::linear_forward. One token (decode) of f16, int8 or int4 (groups of 16k columns) on an x86
// CPU with AVX2, FMA and F16C: a GEMV straight from the encoding, 8-16 columns a step, rows over the
// OpenMP threads, each weight read once (ops/cpu/gemv_avx2.h; measured against the tiles in
// bench/vulkan_notes.md, "CPU"). Else
// kLinearTileRows rows of W at a time are converted into an fp32 tile (the dequantize functions of
// ops/cpu/quantized, f16 through F16C or a table) for the BLAS GEMM (GEMV for one token), the tiles
// over the OpenMP threads: each weight converted once per call, no more than one tile
// (kLinearTileRows x W.cols floats, in cache) a thread held in fp32.
constexpr int64_t kLinearTileRows = 64;
// Up to this many tokens (a short prompt) the AVX2 GEMV serves too, 4 tokens a pass over W: the
// crossover measured against the tiles (bench/vulkan_notes.md, "CPU").
constexpr int64_t kLinearGemvTokens = 32;
void linear(float* y, const float* x, int64_t n, const WeightView& w, const float* bias);

// Rows [first, first + count) of W converted to fp32 into out (count, W.cols): embedding lookups,
// GEMM tiles.
void weight_rows(const WeightView& w, int64_t first, int64_t count, float* out);

}  // namespace pylon

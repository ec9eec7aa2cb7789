// The CPU reference for quantized weights: int8 (per output channel) and int4 (group-wise along the
// input dim) quantize / dequantize, and GEMM/GEMV over them with fp32 accumulation. The test oracle
// for the Vulkan shaders. A weight W is (rows = out, cols = in), row-major, as in nn.Linear.
#pragma once

#include <cstdint>

namespace pylon {

// int8: W[r, c] ~ scales[r] * q[r, c], q in [-127, 127], scales[r] = max_c |W[r, c]| / 127.
// Rounding to nearest gives |W - dequantized| <= scales[r] / 2 per element.
void quantize_int8_rows(const float* w, int64_t rows, int64_t cols, int8_t* q, float* scales);
void dequantize_int8_rows(const int8_t* q, const float* scales, int64_t rows, int64_t cols, float* w);

// int4: groups of `group` consecutive columns (the last one may be shorter) share one scale:
// W[r, c] ~ scales[r, c / group] * q[r, c], q in [-7, 7] stored as two's-complement nibbles,
// two per byte: column c of row r is in byte r * int4_row_bytes(cols) + c / 2, the low nibble for
// even c. scales (rows, int4_groups(cols, group)) = max |W| over the group / 7; with f16_scales
// each scale is rounded up to an fp16 value, so the error bound |W - deq| <= scale / 2 still holds.
int64_t int4_row_bytes(int64_t cols);
// Column c of an int4 row (its nibble, two's complement).
inline int int4_value(const uint8_t* row, int64_t c) {
  const int nibble = (row[c / 2] >> ((c & 1) * 4)) & 0x0f;
  return (nibble ^ 8) - 8;  // two's complement, without a branch
}
int64_t int4_groups(int64_t cols, int group);
void quantize_int4_groups(const float* w, int64_t rows, int64_t cols, int group, bool f16_scales,
                          uint8_t* q, float* scales);
void dequantize_int4_groups(const uint8_t* q, const float* scales, int64_t rows, int64_t cols,
                            int group, float* w);

// y (n, rows) = x (n, cols) · dequantized(W)ᵀ. Each weight is dequantized in fp32 (q * scale) and
// accumulated in fp32 in column order, so the result equals dequantize-then-fp32-GEMM.
void gemm_int8(const float* x, int64_t n, const int8_t* q, const float* scales, int64_t rows,
               int64_t cols, float* y);
void gemm_int4(const float* x, int64_t n, const uint8_t* q, const float* scales, int64_t rows,
               int64_t cols, int group, float* y);
// Decode: one token, n = 1.
inline void gemv_int8(const float* x, const int8_t* q, const float* scales, int64_t rows,
                      int64_t cols, float* y) {
  gemm_int8(x, 1, q, scales, rows, cols, y);
}
inline void gemv_int4(const float* x, const uint8_t* q, const float* scales, int64_t rows,
                      int64_t cols, int group, float* y) {
  gemm_int4(x, 1, q, scales, rows, cols, group, y);
}

}  // namespace pylon

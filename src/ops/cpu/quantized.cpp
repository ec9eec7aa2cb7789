// Reference int8 / int4 weight quantization and GEMM (see quantized.h for the layouts).
#include "ops/cpu/quantized.h"

#include <algorithm>
#include <cmath>

#include "core/half.h"

namespace pylon {
namespace {

float max_abs(const float* w, int64_t n) {
  float m = 0.0f;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, std::fabs(w[i]));
  return m;
}

// round(w / scale) clamped to [-limit, limit]; 0 for an all-zero group (scale 0).
int quantize_value(float w, float scale, int limit) {
  if (scale == 0.0f) return 0;
  const float q = std::nearbyint(w / scale);
  return static_cast<int>(std::clamp(q, static_cast<float>(-limit), static_cast<float>(limit)));
}

// The smallest fp16 value >= s (s >= 0), as fp32.
float round_up_to_half(float s) {
  uint16_t h = float_to_half(s);
  if (half_to_float(h) < s) ++h;  // positive halves order like their bit patterns
  return half_to_float(h);
}

}  // namespace

void quantize_int8_rows(const float* w, int64_t rows, int64_t cols, int8_t* q, float* scales) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* wr = w + r * cols;
    const float scale = max_abs(wr, cols) / 127.0f;
    scales[r] = scale;
    for (int64_t c = 0; c < cols; ++c)
      q[r * cols + c] = static_cast<int8_t>(quantize_value(wr[c], scale, 127));
  }
}

void dequantize_int8_rows(const int8_t* q, const float* scales, int64_t rows, int64_t cols, float* w) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) w[r * cols + c] = static_cast<float>(q[r * cols + c]) * scales[r];
}

int64_t int4_row_bytes(int64_t cols) { return (cols + 1) / 2; }
int64_t int4_groups(int64_t cols, int group) { return (cols + group - 1) / group; }

void quantize_int4_groups(const float* w, int64_t rows, int64_t cols, int group, bool f16_scales,
                          uint8_t* q, float* scales) {
  const int64_t row_bytes = int4_row_bytes(cols), groups = int4_groups(cols, group);
  std::fill(q, q + rows * row_bytes, uint8_t{0});
  for (int64_t r = 0; r < rows; ++r) {
    const float* wr = w + r * cols;
    uint8_t* qr = q + r * row_bytes;
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t begin = g * group, end = std::min(cols, begin + group);
      float scale = max_abs(wr + begin, end - begin) / 7.0f;
      if (f16_scales) scale = round_up_to_half(scale);
      scales[r * groups + g] = scale;
      for (int64_t c = begin; c < end; ++c) {
        const uint8_t nibble = static_cast<uint8_t>(quantize_value(wr[c], scale, 7) & 0x0f);
        qr[c / 2] |= (c % 2 == 0) ? nibble : static_cast<uint8_t>(nibble << 4);
      }
    }
  }
}

void dequantize_int4_groups(const uint8_t* q, const float* scales, int64_t rows, int64_t cols,
                            int group, float* w) {
  const int64_t row_bytes = int4_row_bytes(cols), groups = int4_groups(cols, group);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < groups; ++g) {  // a byte (two columns) at a time: groups start even
      const float scale = scales[r * groups + g];
      const int64_t begin = g * group, count = std::min(cols, begin + group) - begin;
      const uint8_t* qb = q + r * row_bytes + begin / 2;
      float* out = w + r * cols + begin;
      for (int64_t k = 0; k < count / 2; ++k) {
        out[2 * k] = static_cast<float>(static_cast<int8_t>(qb[k] << 4) >> 4) * scale;
        out[2 * k + 1] = static_cast<float>(static_cast<int8_t>(qb[k]) >> 4) * scale;
      }
      if (count % 2) out[count - 1] = static_cast<float>(int4_value(qb, count - 1)) * scale;
    }
}

void gemm_int8(const float* x, int64_t n, const int8_t* q, const float* scales, int64_t rows,
               int64_t cols, float* y) {
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t i = 0; i < n; ++i)
    for (int64_t r = 0; r < rows; ++r) {
      const float* xi = x + i * cols;
      const int8_t* qr = q + r * cols;
      float acc = 0.0f;
      for (int64_t c = 0; c < cols; ++c) acc += xi[c] * (static_cast<float>(qr[c]) * scales[r]);
      y[i * rows + r] = acc;
    }
}

void gemm_int4(const float* x, int64_t n, const uint8_t* q, const float* scales, int64_t rows,
               int64_t cols, int group, float* y) {
  const int64_t row_bytes = int4_row_bytes(cols), groups = int4_groups(cols, group);
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t i = 0; i < n; ++i)
    for (int64_t r = 0; r < rows; ++r) {
      const float* xi = x + i * cols;
      const uint8_t* qr = q + r * row_bytes;
      const float* sr = scales + r * groups;
      float acc = 0.0f;
      for (int64_t c = 0; c < cols; ++c)
        acc += xi[c] * (static_cast<float>(int4_value(qr, c)) * sr[c / group]);
      y[i * rows + r] = acc;
    }
}

}  // namespace pylon

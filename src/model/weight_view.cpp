// linear() and weight_row() over the encodings of a WeightView.
#include "model/weight_view.h"

#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/half.h"
#include "ops/cpu/ops.h"
#include "ops/cpu/quantized.h"

namespace pylon {

WeightView f32_view(const float* w, int64_t rows, int64_t cols) {
  WeightView v;
  v.dtype = EdgeDType::f32, v.rows = rows, v.cols = cols, v.values = w;
  return v;
}

void linear(float* y, const float* x, int64_t n, const WeightView& w, const float* bias) {
  const int64_t rows = w.rows, cols = w.cols;
  switch (w.dtype) {
    case EdgeDType::f32:
      cpu::linear_forward(y, x, static_cast<const float*>(w.values), bias, static_cast<int>(n),
                          static_cast<int>(cols), static_cast<int>(rows));
      return;
    case EdgeDType::f16:
      gemm_f16(x, n, static_cast<const uint16_t*>(w.values), rows, cols, y);
      break;
    case EdgeDType::int8:
      gemm_int8(x, n, static_cast<const int8_t*>(w.values), static_cast<const float*>(w.scales),
                rows, cols, y);
      break;
    case EdgeDType::int4:
      if (w.scale_dtype == EdgeDType::f16)
        gemm_int4(x, n, static_cast<const uint8_t*>(w.values), static_cast<const uint16_t*>(w.scales),
                  rows, cols, w.group_size, y);
      else
        gemm_int4(x, n, static_cast<const uint8_t*>(w.values), static_cast<const float*>(w.scales),
                  rows, cols, w.group_size, y);
      break;
  }
  if (!bias) return;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t r = 0; r < rows; ++r) y[i * rows + r] += bias[r];
}

void weight_row(const WeightView& w, int64_t r, float* out) {
  PYLON_ASSERT(r >= 0 && r < w.rows, "weight row ", r, " outside ", w.rows);
  const int64_t cols = w.cols;
  switch (w.dtype) {
    case EdgeDType::f32:
      std::memcpy(out, static_cast<const float*>(w.values) + r * cols, sizeof(float) * cols);
      return;
    case EdgeDType::f16: {
      const uint16_t* row = static_cast<const uint16_t*>(w.values) + r * cols;
      for (int64_t c = 0; c < cols; ++c) out[c] = half_to_float(row[c]);
      return;
    }
    case EdgeDType::int8:
      dequantize_int8_rows(static_cast<const int8_t*>(w.values) + r * cols,
                           static_cast<const float*>(w.scales) + r, 1, cols, out);
      return;
    case EdgeDType::int4: {
      const int64_t groups = int4_groups(cols, w.group_size);
      std::vector<float> scales(static_cast<size_t>(groups));
      for (int64_t g = 0; g < groups; ++g)
        scales[g] = w.scale_dtype == EdgeDType::f16
                        ? half_to_float(static_cast<const uint16_t*>(w.scales)[r * groups + g])
                        : static_cast<const float*>(w.scales)[r * groups + g];
      dequantize_int4_groups(static_cast<const uint8_t*>(w.values) + r * int4_row_bytes(cols),
                             scales.data(), 1, cols, w.group_size, out);
      return;
    }
  }
}

}  // namespace pylon

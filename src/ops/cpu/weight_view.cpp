// linear() and weight_rows() over the encodings of a WeightView.
#include "ops/cpu/weight_view.h"

#include <algorithm>
#include <cstring>
#include <vector>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

#include "core/error.h"
#include "core/half.h"
#include "ops/cpu/gemm.h"
#include "ops/cpu/gemv_avx2.h"
#include "ops/cpu/ops.h"
#include "ops/cpu/quantized.h"

namespace pylon {

WeightView f32_view(const float* w, int64_t rows, int64_t cols) {
  WeightView v;
  v.dtype = EdgeDType::f32, v.rows = rows, v.cols = cols, v.values = w;
  return v;
}

namespace {

// Every fp16 bit pattern as fp32 (256 KiB): a table lookup converts f16 weights several times
// faster than half_to_float's branches, with the same values.
const float* half_table() {
  static const std::vector<float> table = [] {
    std::vector<float> t(65536);
    for (uint32_t h = 0; h < 65536; ++h) t[h] = half_to_float(static_cast<uint16_t>(h));
    return t;
  }();
  return table.data();
}

#if defined(__x86_64__) && defined(__GNUC__)
// fp16 -> fp32 eight at a time with the F16C instruction (exact, the same values as the table).
__attribute__((target("avx,f16c"))) void halves_to_floats_f16c(const uint16_t* v, int64_t n, float* out) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(v + i))));
  const float* table = half_table();
  for (; i < n; ++i) out[i] = table[v[i]];
}
#endif

// out (n) = the fp16 values v (n) as fp32: F16C where the CPU has it, else the table.
void halves_to_floats(const uint16_t* v, int64_t n, float* out) {
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool f16c = __builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c");
  if (f16c) return halves_to_floats_f16c(v, n, out);
#endif
  const float* table = half_table();
  for (int64_t i = 0; i < n; ++i) out[i] = table[v[i]];
}

// y (n, W.rows) = x (n, W.cols) · Wᵀ, W converted kLinearTileRows rows at a time for the BLAS GEMM.
// The tiles go over the OpenMP threads, each converting its own and running the GEMM on it alone
// (the BLAS runs one thread inside a parallel region): the conversion is parallel too, and a short
// prompt's many small GEMMs pay no thread hand-off each (bench/vulkan_notes.md, "CPU").
void gemm_tiled(float* y, const float* x, int64_t n, const WeightView& w) {
  const int rows = static_cast<int>(w.rows), cols = static_cast<int>(w.cols), tile_rows = static_cast<int>(kLinearTileRows);
  const int tiles = (rows + tile_rows - 1) / tile_rows;
#pragma omp parallel if (tiles > 1)
  {
    std::vector<float> tile(static_cast<size_t>(std::min(kLinearTileRows, w.rows) * w.cols));
#pragma omp for schedule(dynamic)
    for (int t = 0; t < tiles; ++t) {
      const int r0 = t * tile_rows, count = std::min(tile_rows, rows - r0);
      weight_rows(w, r0, count, tile.data());  // (count, cols)
      // y[:, r0 : r0 + count] (n, count) = x (n, cols) · tileᵀ
      cpu::gemm<float>(false, true, static_cast<int>(n), count, cols, 1.0f, x, cols, tile.data(), cols, 0.0f,
                       y + r0, rows);
    }
  }
}

}  // namespace

void linear(float* y, const float* x, int64_t n, const WeightView& w, const float* bias) {
  if (w.dtype == EdgeDType::f32) {
    cpu::linear_forward(y, x, static_cast<const float*>(w.values), bias, static_cast<int>(n),
                        static_cast<int>(w.cols), static_cast<int>(w.rows));
    return;
  }
  if (n == 1 && gemv_avx2_serves(w))
    gemv_avx2(y, x, w);
  else if (n <= kLinearGemvTokens && gemv_avx2_serves(w))
    gemv_tokens_avx2(y, x, n, w);
  else
    gemm_tiled(y, x, n, w);
  if (!bias) return;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t r = 0; r < w.rows; ++r) y[i * w.rows + r] += bias[r];
}

void weight_rows(const WeightView& w, int64_t first, int64_t count, float* out) {
  PYLON_ASSERT(first >= 0 && count >= 0 && first + count <= w.rows, "weight rows [", first, ", ",
               first + count, ") outside ", w.rows);
  const int64_t cols = w.cols, n = count * cols;
  switch (w.dtype) {
    case EdgeDType::f32:
      std::memcpy(out, static_cast<const float*>(w.values) + first * cols, sizeof(float) * n);
      return;
    case EdgeDType::f16: {
      halves_to_floats(static_cast<const uint16_t*>(w.values) + first * cols, n, out);
      return;
    }
    case EdgeDType::int8:
      dequantize_int8_rows(static_cast<const int8_t*>(w.values) + first * cols,
                           static_cast<const float*>(w.scales) + first, count, cols, out);
      return;
    case EdgeDType::int4: {
      const int64_t groups = int4_groups(cols, w.group_size);
      std::vector<float> scales(static_cast<size_t>(count * groups));
      for (int64_t i = 0; i < count * groups; ++i)
        scales[i] = w.scale_dtype == EdgeDType::f16
                        ? half_to_float(static_cast<const uint16_t*>(w.scales)[first * groups + i])
                        : static_cast<const float*>(w.scales)[first * groups + i];
      dequantize_int4_groups(static_cast<const uint8_t*>(w.values) + first * int4_row_bytes(cols),
                             scales.data(), count, cols, w.group_size, out);
      return;
    }
  }
}

}  // namespace pylon

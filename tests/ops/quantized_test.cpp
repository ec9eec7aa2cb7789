// The quantized-weight encodings: quantization error within scale/2 per element, zeros stay zero,
// fp16 conversion rounds to nearest even. (The int8 / int4 GEMV and GEMM kernels are rows of the
// op harness: ops/cpu/cpu_op_table.cpp.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "core/half.h"
#include "ops/cpu/quantized.h"
#include "support/op_check.h"

namespace pylon {
namespace {

using testing::CheckLabel;
using testing::DType;
using testing::kExact;

std::vector<float> random_normal(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

CheckLabel label(const char* op, DType d, int64_t rows, int64_t cols, const std::string& variant = "") {
  return {op, "cpu", testing::dtype_name(d), "rows=" + std::to_string(rows) + " cols=" + std::to_string(cols), variant,
          "dequantized"};
}

TEST(Quantized, Int8ErrorWithinHalfScalePerRow) {
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{37, 53}, {1, 1}, {64, 257}}) {
    const auto w = random_normal(static_cast<size_t>(rows * cols), 1);
    std::vector<int8_t> q(w.size());
    std::vector<float> scales(static_cast<size_t>(rows)), deq(w.size());
    quantize_int8_rows(w.data(), rows, cols, q.data(), scales.data());
    dequantize_int8_rows(q.data(), scales.data(), rows, cols, deq.data());
    // The bound scale/2 (rounding to nearest), plus fp32 rounding of w/scale and q*scale (a few
    // ulps of |w|).
    std::vector<double> bound(w.size());
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) bound[r * cols + c] = scales[r] * 0.5f * (1 + 1e-5f);
    EXPECT_TRUE(all_close(label("quantize_int8_rows", DType::int8, rows, cols), deq, w, DType::f32, kExact, bound));
    double worst = 0;  // measured: 0.5 of the scale
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        worst = std::max(worst, static_cast<double>(std::fabs(w[r * cols + c] - deq[r * cols + c]) / scales[r]));
        EXPECT_LE(std::abs(int{q[r * cols + c]}), 127);
      }
    EXPECT_LE(worst, 0.5 + 1e-5);
  }
}

TEST(Quantized, Int4ErrorWithinHalfScalePerGroup) {
  for (int group : {32, 64})
    for (bool f16_scales : {true, false})
      for (auto [rows, cols] : {std::pair<int64_t, int64_t>{37, 53}, {5, 1}, {16, 200}}) {
        const auto w = random_normal(static_cast<size_t>(rows * cols), 2);
        const int64_t groups = int4_groups(cols, group);
        std::vector<uint8_t> q(static_cast<size_t>(rows * int4_row_bytes(cols)));
        std::vector<float> scales(static_cast<size_t>(rows * groups)), deq(w.size());
        quantize_int4_groups(w.data(), rows, cols, group, f16_scales, q.data(), scales.data());
        dequantize_int4_groups(q.data(), scales.data(), rows, cols, group, deq.data());
        std::vector<double> bound(w.size());
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t c = 0; c < cols; ++c) {
            const float s = scales[r * groups + c / group];
            if (f16_scales) {
              EXPECT_EQ(half_to_float(float_to_half(s)), s);  // exactly an fp16
            }
            bound[r * cols + c] = s * 0.5f * (1 + 1e-5f);
          }
        const std::string variant = "group=" + std::to_string(group) + (f16_scales ? " scales=f16" : " scales=f32");
        EXPECT_TRUE(
            all_close(label("quantize_int4_groups", DType::int4, rows, cols, variant), deq, w, DType::f32, kExact, bound));
      }
}

TEST(Quantized, ZeroWeightsStayZero) {
  const std::vector<float> w(3 * 40, 0.0f);
  std::vector<uint8_t> q(3 * 20, 0xff);
  std::vector<float> scales(3 * 2), deq(w.size(), 1.0f);
  quantize_int4_groups(w.data(), 3, 40, 32, true, q.data(), scales.data());
  dequantize_int4_groups(q.data(), scales.data(), 3, 40, 32, deq.data());
  EXPECT_TRUE(all_close(label("quantize_int4_groups", DType::int4, 3, 40, "zeros"), deq, w, DType::f32, kExact));
  std::vector<int8_t> q8(w.size(), 5);
  std::vector<float> s8(3);
  quantize_int8_rows(w.data(), 3, 40, q8.data(), s8.data());
  dequantize_int8_rows(q8.data(), s8.data(), 3, 40, deq.data());
  EXPECT_TRUE(all_close(label("quantize_int8_rows", DType::int8, 3, 40, "zeros"), deq, w, DType::f32, kExact));
}

TEST(Quantized, HalfConversionRoundsToNearestEven) {
  for (uint32_t h = 0; h < 0x7c00; ++h) {  // every finite positive half round-trips exactly
    EXPECT_EQ(float_to_half(half_to_float(static_cast<uint16_t>(h))), h);
  }
  EXPECT_EQ(float_to_half(1.0f + 1.0f / 2048), 0x3c00);  // tie -> even (1.0)
  EXPECT_EQ(float_to_half(1.0f + 3.0f / 2048), 0x3c02);  // tie -> even (1 + 2/1024)
  EXPECT_EQ(float_to_half(-2.0f), 0xc000);
  EXPECT_EQ(float_to_half(1e6f), 0x7c00);  // overflow -> inf
}

}  // namespace
}  // namespace pylon

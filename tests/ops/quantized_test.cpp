// The quantized-weight reference: quantization error within scale/2 per element, and GEMV/GEMM over
// int8 / int4 weights equal to dequantize-then-fp32 GEMM, at odd sizes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "core/half.h"
#include "ops/cpu/quantized.h"

namespace pylon {
namespace {

std::vector<float> random_normal(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

// y (n, rows) = x (n, cols) · Wᵀ, plain fp32 loop: the oracle.
std::vector<float> gemm_f32(const std::vector<float>& x, int64_t n, const std::vector<float>& w,
                            int64_t rows, int64_t cols) {
  std::vector<float> y(static_cast<size_t>(n * rows));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t r = 0; r < rows; ++r) {
      float acc = 0.0f;
      for (int64_t c = 0; c < cols; ++c) acc += x[i * cols + c] * w[r * cols + c];
      y[i * rows + r] = acc;
    }
  return y;
}

void expect_close(const std::vector<float>& out, const std::vector<float>& ref, float rtol, float atol) {
  ASSERT_EQ(out.size(), ref.size());
  for (size_t i = 0; i < out.size(); ++i)
    ASSERT_LE(std::fabs(out[i] - ref[i]), atol + rtol * std::fabs(ref[i])) << "element " << i;
}

TEST(Quantized, Int8ErrorWithinHalfScalePerRow) {
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{37, 53}, {1, 1}, {64, 257}}) {
    const auto w = random_normal(static_cast<size_t>(rows * cols), 1);
    std::vector<int8_t> q(w.size());
    std::vector<float> scales(static_cast<size_t>(rows)), deq(w.size());
    quantize_int8_rows(w.data(), rows, cols, q.data(), scales.data());
    dequantize_int8_rows(q.data(), scales.data(), rows, cols, deq.data());
    double worst = 0;  // measured: 0.5 of the scale (rounding to nearest)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        const float err = std::fabs(w[r * cols + c] - deq[r * cols + c]);
        // The bound scale/2, plus fp32 rounding of w/scale and q*scale (a few ulps of |w|).
        EXPECT_LE(err, scales[r] * 0.5f * (1 + 1e-5f)) << r << "," << c;
        worst = std::max(worst, static_cast<double>(err / scales[r]));
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
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t c = 0; c < cols; ++c) {
            const float s = scales[r * groups + c / group];
            if (f16_scales) {
              EXPECT_EQ(half_to_float(float_to_half(s)), s);  // exactly an fp16
            }
            EXPECT_LE(std::fabs(w[r * cols + c] - deq[r * cols + c]), s * 0.5f * (1 + 1e-5f))
                << "group " << group << " row " << r << " col " << c;
          }
      }
}

TEST(Quantized, ZeroWeightsStayZero) {
  const std::vector<float> w(3 * 40, 0.0f);
  std::vector<uint8_t> q(3 * 20, 0xff);
  std::vector<float> scales(3 * 2), deq(w.size(), 1.0f);
  quantize_int4_groups(w.data(), 3, 40, 32, true, q.data(), scales.data());
  dequantize_int4_groups(q.data(), scales.data(), 3, 40, 32, deq.data());
  for (float x : deq) EXPECT_EQ(x, 0.0f);
  std::vector<int8_t> q8(w.size(), 5);
  std::vector<float> s8(3);
  quantize_int8_rows(w.data(), 3, 40, q8.data(), s8.data());
  dequantize_int8_rows(q8.data(), s8.data(), 3, 40, deq.data());
  for (float x : deq) EXPECT_EQ(x, 0.0f);
}

// rtol 1e-5 (the brief); the reference dequantizes each weight and accumulates in the same order,
// so the measured difference is 0.
TEST(Quantized, GemmInt8MatchesDequantizedGemm) {
  for (auto [n, rows, cols] : {std::tuple<int64_t, int64_t, int64_t>{1, 37, 53}, {3, 65, 129}, {7, 1, 31}}) {
    const auto w = random_normal(static_cast<size_t>(rows * cols), 3);
    const auto x = random_normal(static_cast<size_t>(n * cols), 4);
    std::vector<int8_t> q(w.size());
    std::vector<float> scales(static_cast<size_t>(rows)), deq(w.size());
    quantize_int8_rows(w.data(), rows, cols, q.data(), scales.data());
    dequantize_int8_rows(q.data(), scales.data(), rows, cols, deq.data());
    std::vector<float> y(static_cast<size_t>(n * rows), std::numeric_limits<float>::quiet_NaN());
    gemm_int8(x.data(), n, q.data(), scales.data(), rows, cols, y.data());
    expect_close(y, gemm_f32(x, n, deq, rows, cols), 1e-5f, 1e-6f);
    if (n == 1) {
      std::vector<float> v(static_cast<size_t>(rows), std::numeric_limits<float>::quiet_NaN());
      gemv_int8(x.data(), q.data(), scales.data(), rows, cols, v.data());
      expect_close(v, y, 0.0f, 0.0f);
    }
  }
}

TEST(Quantized, GemmInt4MatchesDequantizedGemm) {
  for (int group : {32, 64})
    for (auto [n, rows, cols] : {std::tuple<int64_t, int64_t, int64_t>{1, 37, 53}, {3, 65, 129}, {5, 2, 7}}) {
      const auto w = random_normal(static_cast<size_t>(rows * cols), 5);
      const auto x = random_normal(static_cast<size_t>(n * cols), 6);
      const int64_t groups = int4_groups(cols, group);
      std::vector<uint8_t> q(static_cast<size_t>(rows * int4_row_bytes(cols)));
      std::vector<float> scales(static_cast<size_t>(rows * groups)), deq(w.size());
      quantize_int4_groups(w.data(), rows, cols, group, true, q.data(), scales.data());
      dequantize_int4_groups(q.data(), scales.data(), rows, cols, group, deq.data());
      std::vector<float> y(static_cast<size_t>(n * rows), std::numeric_limits<float>::quiet_NaN());
      gemm_int4(x.data(), n, q.data(), scales.data(), rows, cols, group, y.data());
      expect_close(y, gemm_f32(x, n, deq, rows, cols), 1e-5f, 1e-6f);
      if (n == 1) {
        std::vector<float> v(static_cast<size_t>(rows), std::numeric_limits<float>::quiet_NaN());
        gemv_int4(x.data(), q.data(), scales.data(), rows, cols, group, v.data());
        expect_close(v, y, 0.0f, 0.0f);
      }
    }
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

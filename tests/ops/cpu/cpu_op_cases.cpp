// CPU rows: the quantized GEMM / GEMV kernels against dequantize-then-fp32-GEMM.
#include "ops/cpu/cpu_op_cases.h"

#include <limits>
#include <random>
#include <string>
#include <vector>

#include "ops/cpu/quantized.h"

namespace pylon::cpu::testing {
namespace {

using ::pylon::testing::Backend;
using ::pylon::testing::DType;
using ::pylon::testing::OpRun;
using ::pylon::testing::shape_of;
using ::pylon::testing::Tolerance;

// The reference dequantizes each weight and accumulates in the same order, so the measured
// difference is 0; rtol 1e-5 leaves room for another order.
constexpr Tolerance kQuantizedTol{.rtol = 1e-5, .atol = 1e-6};

std::vector<float> random_normal(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

// y (n, rows) = x (n, cols) · Wᵀ, plain fp32 loop: the oracle.
std::vector<float> gemm_f32(const std::vector<float>& x, int64_t n, const std::vector<float>& w, int64_t rows,
                            int64_t cols) {
  std::vector<float> y(static_cast<size_t>(n * rows));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t r = 0; r < rows; ++r) {
      float acc = 0.0f;
      for (int64_t c = 0; c < cols; ++c) acc += x[i * cols + c] * w[r * cols + c];
      y[i * rows + r] = acc;
    }
  return y;
}

std::vector<float> poisoned(size_t n) { return std::vector<float>(n, std::numeric_limits<float>::quiet_NaN()); }

}  // namespace

OpCase gemm_int8(int64_t n, int64_t rows, int64_t cols) {
  OpCase c{"gemm_int8", Backend::cpu, DType::int8, shape_of({{"n", n}, {"rows", rows}, {"cols", cols}}), "", {}, {}};
  c.run = [=](const OpRun& run) {
    const auto w = random_normal(static_cast<size_t>(rows * cols), 3);
    const auto x = random_normal(static_cast<size_t>(n * cols), 4);
    std::vector<int8_t> q(w.size());
    std::vector<float> scales(static_cast<size_t>(rows)), deq(w.size());
    quantize_int8_rows(w.data(), rows, cols, q.data(), scales.data());
    dequantize_int8_rows(q.data(), scales.data(), rows, cols, deq.data());
    std::vector<float> y = poisoned(static_cast<size_t>(n * rows));
    pylon::gemm_int8(x.data(), n, q.data(), scales.data(), rows, cols, y.data());
    run.expect_close("y", y, gemm_f32(x, n, deq, rows, cols), DType::f32, kQuantizedTol);
    if (n == 1) {
      std::vector<float> v = poisoned(static_cast<size_t>(rows));
      pylon::gemv_int8(x.data(), q.data(), scales.data(), rows, cols, v.data());
      run.expect_bitwise("y of gemv_int8 against gemm_int8", v, y);
    }
  };
  return c;
}

OpCase gemm_int4(int group, int64_t n, int64_t rows, int64_t cols) {
  OpCase c{"gemm_int4", Backend::cpu, DType::int4, shape_of({{"n", n}, {"rows", rows}, {"cols", cols}}),
           "group=" + std::to_string(group), {}, {}};
  c.run = [=](const OpRun& run) {
    const auto w = random_normal(static_cast<size_t>(rows * cols), 5);
    const auto x = random_normal(static_cast<size_t>(n * cols), 6);
    const int64_t groups = int4_groups(cols, group);
    std::vector<uint8_t> q(static_cast<size_t>(rows * int4_row_bytes(cols)));
    std::vector<float> scales(static_cast<size_t>(rows * groups)), deq(w.size());
    quantize_int4_groups(w.data(), rows, cols, group, true, q.data(), scales.data());
    dequantize_int4_groups(q.data(), scales.data(), rows, cols, group, deq.data());
    std::vector<float> y = poisoned(static_cast<size_t>(n * rows));
    pylon::gemm_int4(x.data(), n, q.data(), scales.data(), rows, cols, group, y.data());
    run.expect_close("y", y, gemm_f32(x, n, deq, rows, cols), DType::f32, kQuantizedTol);
    if (n == 1) {
      std::vector<float> v = poisoned(static_cast<size_t>(rows));
      pylon::gemv_int4(x.data(), q.data(), scales.data(), rows, cols, group, v.data());
      run.expect_bitwise("y of gemv_int4 against gemm_int4", v, y);
    }
  };
  return c;
}

}  // namespace pylon::cpu::testing

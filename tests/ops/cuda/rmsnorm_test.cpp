// Fused residual add + RMSNorm and its backward against cpu::rmsnorm_forward/backward (fp64 on the
// bf16-rounded inputs, so fp32 statistics are checked against exact ones).
#include <gtest/gtest.h>

#include "ops/cpu/ops.h"
#include "ops/cuda/rmsnorm.h"
#include "support/cuda_test_util.h"

namespace pylon::cuda {
namespace {

using namespace pylon::cuda::testing;
constexpr float kEps = 1.1920929e-07f;  // the seed preset's eps
// dw sums N rows in fp32 in another order than the reference: ~10x the fp32 default.
constexpr Tolerance kF32SumTol{1e-5, 1e-4};

std::string shape(int N, int C) { return " N=" + std::to_string(N) + " C=" + std::to_string(C); }

void check_forward(int N, int C, bool with_delta, uint64_t seed) {
  const size_t n = static_cast<size_t>(N) * C;
  const std::vector<float> x = random_bf16_values(n, seed), delta = random_bf16_values(n, seed + 1);
  const std::vector<float> w = random_bf16_values(C, seed + 2);
  DeviceArray<bf16> d_x(to_bf16(x)), d_delta(to_bf16(delta)), d_w(to_bf16(w)), d_xout(n), d_h(n);
  DeviceArray<float> d_rstd(N);
  d_xout.poison(), d_h.poison(), d_rstd.poison();
  residual_rmsnorm_forward(with_delta ? d_xout.get() : nullptr, d_h.get(), d_rstd.get(), d_x.get(),
                           with_delta ? d_delta.get() : nullptr, d_w.get(), N, C, kEps, nullptr);

  std::vector<double> x_out(n), h(n), rstd(N);
  for (size_t i = 0; i < n; ++i) x_out[i] = with_delta ? round_bf16(x[i] + delta[i]) : x[i];
  const std::vector<double> w_d(w.begin(), w.end());
  cpu::rmsnorm_forward(h.data(), rstd.data(), x_out.data(), w_d.data(), N, C, static_cast<double>(kEps));
  if (with_delta) {
    EXPECT_TRUE(all_close(to_float(d_xout.download()), x_out, Tolerance{0, 0}, "x_out" + shape(N, C)));
  }
  EXPECT_TRUE(all_close(to_float(d_h.download()), h, kBf16Tol, "h" + shape(N, C)));
  EXPECT_TRUE(all_close(d_rstd.download(), rstd, kF32Tol, "rstd" + shape(N, C)));
}

void check_backward(int N, int C, bool with_dres, uint64_t seed) {
  const size_t n = static_cast<size_t>(N) * C;
  const std::vector<float> x = random_bf16_values(n, seed), dh = random_bf16_values(n, seed + 1);
  const std::vector<float> dres = random_bf16_values(n, seed + 2), w = random_bf16_values(C, seed + 3);
  const std::vector<float> dw0 = random_f32_values(C, seed + 4);
  std::vector<double> x_d(x.begin(), x.end()), w_d(w.begin(), w.end()), rstd_d(N), scratch(n);
  cpu::rmsnorm_forward(scratch.data(), rstd_d.data(), x_d.data(), w_d.data(), N, C, static_cast<double>(kEps));
  std::vector<float> rstd(rstd_d.begin(), rstd_d.end());

  DeviceArray<bf16> d_x(to_bf16(x)), d_dh(to_bf16(dh)), d_dres(to_bf16(dres)), d_w(to_bf16(w)), d_dx(n);
  DeviceArray<float> d_rstd(rstd), d_dw(dw0);
  DeviceArray<char> ws(rmsnorm_backward_workspace_bytes(N, C));
  d_dx.poison();
  rmsnorm_backward(d_dx.get(), d_dw.get(), d_dh.get(), with_dres ? d_dres.get() : nullptr, d_x.get(), d_w.get(),
                   d_rstd.get(), N, C, ws.get(), nullptr);
  const std::vector<float> dw_got = d_dw.download();

  std::vector<double> dx(n), dw(dw0.begin(), dw0.end()), dh_d(dh.begin(), dh.end());
  std::vector<double> rstd_f(rstd.begin(), rstd.end());  // the fp32 rstd the kernel is given
  cpu::rmsnorm_backward(dx.data(), dw.data(), dh_d.data(), x_d.data(), w_d.data(), rstd_f.data(), N, C);
  if (with_dres)
    for (size_t i = 0; i < n; ++i) dx[i] += dres[i];
  EXPECT_TRUE(all_close(to_float(d_dx.download()), dx, kBf16Tol, "dx" + shape(N, C)));
  EXPECT_TRUE(all_close(dw_got, dw, kF32SumTol, "dw" + shape(N, C)));

  d_dw.upload(dw0);
  rmsnorm_backward(d_dx.get(), d_dw.get(), d_dh.get(), with_dres ? d_dres.get() : nullptr, d_x.get(), d_w.get(),
                   d_rstd.get(), N, C, ws.get(), nullptr);
  EXPECT_TRUE(bitwise_equal(dw_got, d_dw.download())) << "rmsnorm_backward dw is not deterministic";

  // With the column sums of dx (a bias gradient): dx and dw unchanged bit for bit, and
  // dsum += Σ_rows dx as stored, against a double sum of the downloaded dx (fp32 sum tolerance).
  const std::vector<bf16> dx_got = d_dx.download();
  const std::vector<float> dsum0 = random_f32_values(C, seed + 5);
  DeviceArray<float> d_dsum(dsum0);
  d_dw.upload(dw0), d_dx.poison();
  rmsnorm_backward(d_dx.get(), d_dw.get(), d_dh.get(), with_dres ? d_dres.get() : nullptr, d_x.get(), d_w.get(),
                   d_rstd.get(), N, C, ws.get(), nullptr, d_dsum.get());
  EXPECT_TRUE(bitwise_equal(dx_got, d_dx.download())) << "dx differs with the column sums" << shape(N, C);
  EXPECT_TRUE(bitwise_equal(dw_got, d_dw.download())) << "dw differs with the column sums" << shape(N, C);
  std::vector<double> dsum(dsum0.begin(), dsum0.end());
  for (int r = 0; r < N; ++r)
    for (int c = 0; c < C; ++c) dsum[static_cast<size_t>(c)] += as_double(dx_got[static_cast<size_t>(r) * C + c]);
  EXPECT_TRUE(all_close(d_dsum.download(), dsum, kF32SumTol, "dx column sums" + shape(N, C)));
}

TEST(CudaRmsNorm, ForwardOddSizes) {
  PYLON_SKIP_WITHOUT_CUDA();
  check_forward(7, 2051, true, 1);
  check_forward(7, 2051, false, 2);
  check_forward(33, 8, false, 3);
}

TEST(CudaRmsNorm, ForwardSeedPreset) {
  PYLON_SKIP_WITHOUT_CUDA();
  check_forward(8192, 2048, true, 4);
  check_forward(8192, 2048, false, 5);
}

TEST(CudaRmsNorm, BackwardOddSizes) {
  PYLON_SKIP_WITHOUT_CUDA();
  check_backward(7, 2051, true, 6);
  check_backward(37, 2051, false, 7);
  check_backward(1000, 8, true, 8);
}

TEST(CudaRmsNorm, BackwardSeedPreset) {
  PYLON_SKIP_WITHOUT_CUDA();
  check_backward(8192, 2048, true, 9);
  check_backward(8192, 2048, false, 10);
}

TEST(CudaRmsNorm, BackwardInPlaceResidual) {
  PYLON_SKIP_WITHOUT_CUDA();
  // dx aliases dresidual: dx = norm'(dh) + dx, the way the step accumulates the residual gradient.
  const int N = 64, C = 512;
  const size_t n = static_cast<size_t>(N) * C;
  const std::vector<float> x = random_bf16_values(n, 11), dh = random_bf16_values(n, 12);
  const std::vector<float> dres = random_bf16_values(n, 13), w = random_bf16_values(C, 14);
  const std::vector<float> rstd(N, 0.9f);
  DeviceArray<bf16> d_x(to_bf16(x)), d_dh(to_bf16(dh)), d_w(to_bf16(w)), d_inout(to_bf16(dres)), d_dx(n);
  DeviceArray<float> d_rstd(rstd), d_dw(C), d_dw2(C);
  DeviceArray<char> ws(rmsnorm_backward_workspace_bytes(N, C));
  PYLON_CUDA_CHECK(cudaMemset(d_dw.get(), 0, C * sizeof(float)));
  PYLON_CUDA_CHECK(cudaMemset(d_dw2.get(), 0, C * sizeof(float)));
  DeviceArray<bf16> d_dres(to_bf16(dres));
  rmsnorm_backward(d_dx.get(), d_dw.get(), d_dh.get(), d_dres.get(), d_x.get(), d_w.get(), d_rstd.get(), N, C,
                   ws.get(), nullptr);
  rmsnorm_backward(d_inout.get(), d_dw2.get(), d_dh.get(), d_inout.get(), d_x.get(), d_w.get(), d_rstd.get(), N,
                   C, ws.get(), nullptr);
  EXPECT_TRUE(bitwise_equal(d_dx.download(), d_inout.download()));
}

// fp32 (the --dtype fp32 model) on fp32 inputs against the fp64 reference: h and rstd carry a sum
// of C squares, dx and dw sums over C and N terms in fp32 in another order than the reference, so
// kF32SumTol throughout (a bf16 rounding left in the path would be ~1e-3 off and fail).
void check_f32(int N, int C, bool with_delta, uint64_t seed) {
  const size_t n = static_cast<size_t>(N) * C;
  const std::string what = " fp32" + shape(N, C) + (with_delta ? " with residual" : "");
  const std::vector<float> x = random_f32_values(n, seed), delta = random_f32_values(n, seed + 1);
  const std::vector<float> w = random_f32_values(C, seed + 2), dh = random_f32_values(n, seed + 3);
  const std::vector<float> dw0 = random_f32_values(C, seed + 4), dsum0 = random_f32_values(C, seed + 5);
  DeviceArray<float> d_x(x), d_delta(delta), d_w(w), d_xout(n), d_h(n), d_rstd(N), d_dh(dh), d_dx(n), d_dw(dw0),
      d_dsum(dsum0);
  DeviceArray<char> ws(rmsnorm_backward_workspace_bytes(N, C));
  d_xout.poison(), d_h.poison(), d_rstd.poison(), d_dx.poison();
  residual_rmsnorm_forward(with_delta ? d_xout.get() : nullptr, d_h.get(), d_rstd.get(), d_x.get(),
                           with_delta ? d_delta.get() : nullptr, d_w.get(), N, C, kEps, nullptr);
  std::vector<double> x_out(n), h(n), rstd(N);
  for (size_t i = 0; i < n; ++i) x_out[i] = with_delta ? static_cast<double>(x[i] + delta[i]) : x[i];  // the fp32 sum
  const std::vector<double> w_d(w.begin(), w.end());
  cpu::rmsnorm_forward(h.data(), rstd.data(), x_out.data(), w_d.data(), N, C, static_cast<double>(kEps));
  if (with_delta) {
    EXPECT_TRUE(all_close(d_xout.download(), x_out, Tolerance{0, 0}, "x_out" + what));
  }
  EXPECT_TRUE(all_close(d_h.download(), h, kF32SumTol, "h" + what));
  const std::vector<float> rstd_got = d_rstd.download();
  EXPECT_TRUE(all_close(rstd_got, rstd, kF32SumTol, "rstd" + what));

  // Backward on the normalised input x_out with the kernel's own rstd, dresidual = delta.
  const std::vector<float> xin = with_delta ? d_xout.download() : x;
  DeviceArray<float> d_xin(xin);
  rmsnorm_backward(d_dx.get(), d_dw.get(), d_dh.get(), with_delta ? d_delta.get() : nullptr, d_xin.get(), d_w.get(),
                   d_rstd.get(), N, C, ws.get(), nullptr, d_dsum.get());
  std::vector<double> dx(n), dw(dw0.begin(), dw0.end()), dh_d(dh.begin(), dh.end()), x_d(xin.begin(), xin.end());
  const std::vector<double> rstd_f(rstd_got.begin(), rstd_got.end());
  cpu::rmsnorm_backward(dx.data(), dw.data(), dh_d.data(), x_d.data(), w_d.data(), rstd_f.data(), N, C);
  if (with_delta)
    for (size_t i = 0; i < n; ++i) dx[i] += delta[i];
  std::vector<double> dsum(dsum0.begin(), dsum0.end());
  for (int r = 0; r < N; ++r)
    for (int c = 0; c < C; ++c) dsum[static_cast<size_t>(c)] += dx[static_cast<size_t>(r) * C + c];
  EXPECT_TRUE(all_close(d_dx.download(), dx, kF32SumTol, "dx" + what));
  EXPECT_TRUE(all_close(d_dw.download(), dw, kF32SumTol, "dw" + what));
  EXPECT_TRUE(all_close(d_dsum.download(), dsum, kF32SumTol, "dx column sums" + what));
}

TEST(CudaRmsNorm, Fp32OddSizes) {
  PYLON_SKIP_WITHOUT_CUDA();
  check_f32(7, 2051, true, 31);   // scalar path
  check_f32(37, 2051, false, 32);
  check_f32(33, 8, true, 33);     // 8-wide path, one chunk
  check_f32(100, 1024, true, 34);
}

}  // namespace
}  // namespace pylon::cuda

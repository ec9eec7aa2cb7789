// CUDA rows: the fused residual add + RMSNorm and its backward against
// cpu::rmsnorm_forward/backward in fp64 (bf16: on the bf16-rounded inputs, so fp32 statistics are
// checked against exact ones).
#include "ops/cpu/ops.h"
#include "ops/cuda/cuda_op_cases.h"
#include "ops/cuda/rmsnorm.h"

namespace pylon::cuda::testing {
namespace {

constexpr float kEps = 1.1920929e-07f;  // the seed preset's eps
// Sums of N rows (dw) or C columns (fp32: h and rstd carry a sum of C squares, dx a sum over C) in
// fp32 in another order than the reference: ~10x the fp32 default (a bf16 rounding left in an fp32
// path would be ~1e-3 off and fail).
constexpr Tolerance kF32SumTol{.rtol = 1e-5, .atol = 1e-4};

std::string norm_shape(int N, int C) { return shape_of({{"N", N}, {"C", C}}); }

// bf16: x `seed`, delta `seed` + 1, w `seed` + 2.
void forward_bf16(const OpRun& run, int N, int C, bool residual, uint64_t seed) {
  const size_t n = static_cast<size_t>(N) * C;
  const std::vector<float> x = random_bf16_values(n, seed), delta = random_bf16_values(n, seed + 1);
  const std::vector<float> w = random_bf16_values(C, seed + 2);
  DeviceArray<bf16> d_x(to_bf16(x)), d_delta(to_bf16(delta)), d_w(to_bf16(w)), d_xout(n), d_h(n);
  DeviceArray<float> d_rstd(N);
  d_xout.poison(), d_h.poison(), d_rstd.poison();
  cuda::residual_rmsnorm_forward(residual ? d_xout.get() : nullptr, d_h.get(), d_rstd.get(), d_x.get(),
                                 residual ? d_delta.get() : nullptr, d_w.get(), N, C, kEps, nullptr);
  std::vector<double> x_out(n), h(n), rstd(N);
  for (size_t i = 0; i < n; ++i) x_out[i] = residual ? round_bf16(x[i] + delta[i]) : x[i];
  const std::vector<double> w_d(w.begin(), w.end());
  cpu::rmsnorm_forward(h.data(), rstd.data(), x_out.data(), w_d.data(), N, C, static_cast<double>(kEps));
  if (residual) run.expect_close("x_out", to_float(d_xout.download()), x_out, DType::bf16, kExact);
  run.expect_close("h", to_float(d_h.download()), h, DType::bf16);
  run.expect_close("rstd", d_rstd.download(), rstd, DType::f32);
}

// fp32: x `seed`, delta `seed` + 1, w `seed` + 2.
void forward_f32(const OpRun& run, int N, int C, bool residual, uint64_t seed) {
  const size_t n = static_cast<size_t>(N) * C;
  const std::vector<float> x = random_f32_values(n, seed), delta = random_f32_values(n, seed + 1);
  const std::vector<float> w = random_f32_values(C, seed + 2);
  DeviceArray<float> d_x(x), d_delta(delta), d_w(w), d_xout(n), d_h(n), d_rstd(N);
  d_xout.poison(), d_h.poison(), d_rstd.poison();
  cuda::residual_rmsnorm_forward(residual ? d_xout.get() : nullptr, d_h.get(), d_rstd.get(), d_x.get(),
                                 residual ? d_delta.get() : nullptr, d_w.get(), N, C, kEps, nullptr);
  std::vector<double> x_out(n), h(n), rstd(N);
  for (size_t i = 0; i < n; ++i) x_out[i] = residual ? static_cast<double>(x[i] + delta[i]) : x[i];  // the fp32 sum
  const std::vector<double> w_d(w.begin(), w.end());
  cpu::rmsnorm_forward(h.data(), rstd.data(), x_out.data(), w_d.data(), N, C, static_cast<double>(kEps));
  if (residual) run.expect_close("x_out", d_xout.download(), x_out, DType::f32, kExact);
  run.expect_close("h", d_h.download(), h, DType::f32, kF32SumTol);
  run.expect_close("rstd", d_rstd.download(), rstd, DType::f32, kF32SumTol);
}

// bf16: x `seed`, dh + 1, dresidual + 2, w + 3 (bf16), dw0 + 4, dsum0 + 5 (fp32), rstd from the
// fp64 reference rounded to fp32. dw also the same bits on a second run; with the column sums of
// dx (a bias gradient) dx and dw the same bits as without, and dsum += Σ_rows dx as stored.
void backward_bf16(const OpRun& run, int N, int C, bool residual, uint64_t seed) {
  const size_t n = static_cast<size_t>(N) * C;
  const std::vector<float> x = random_bf16_values(n, seed), dh = random_bf16_values(n, seed + 1);
  const std::vector<float> dres = random_bf16_values(n, seed + 2), w = random_bf16_values(C, seed + 3);
  const std::vector<float> dw0 = random_f32_values(C, seed + 4);
  std::vector<double> x_d(x.begin(), x.end()), w_d(w.begin(), w.end()), rstd_d(N), scratch(n);
  cpu::rmsnorm_forward(scratch.data(), rstd_d.data(), x_d.data(), w_d.data(), N, C, static_cast<double>(kEps));
  const std::vector<float> rstd(rstd_d.begin(), rstd_d.end());

  DeviceArray<bf16> d_x(to_bf16(x)), d_dh(to_bf16(dh)), d_dres(to_bf16(dres)), d_w(to_bf16(w)), d_dx(n);
  DeviceArray<float> d_rstd(rstd), d_dw(dw0);
  DeviceArray<char> ws(rmsnorm_backward_workspace_bytes(N, C));
  const bf16* dresidual = residual ? d_dres.get() : nullptr;
  d_dx.poison();
  cuda::rmsnorm_backward(d_dx.get(), d_dw.get(), d_dh.get(), dresidual, d_x.get(), d_w.get(), d_rstd.get(), N, C,
                         ws.get(), nullptr);
  const std::vector<float> dw_got = d_dw.download();
  const std::vector<bf16> dx_got = d_dx.download();

  std::vector<double> dx(n), dw(dw0.begin(), dw0.end()), dh_d(dh.begin(), dh.end());
  const std::vector<double> rstd_f(rstd.begin(), rstd.end());  // the fp32 rstd the kernel is given
  cpu::rmsnorm_backward(dx.data(), dw.data(), dh_d.data(), x_d.data(), w_d.data(), rstd_f.data(), N, C);
  if (residual)
    for (size_t i = 0; i < n; ++i) dx[i] += dres[i];
  run.expect_close("dx", to_float(dx_got), dx, DType::bf16);
  run.expect_close("dw", dw_got, dw, DType::f32, kF32SumTol);

  d_dw.upload(dw0);
  cuda::rmsnorm_backward(d_dx.get(), d_dw.get(), d_dh.get(), dresidual, d_x.get(), d_w.get(), d_rstd.get(), N, C,
                         ws.get(), nullptr);
  run.expect_bitwise("dw, second run", d_dw.download(), dw_got);
  const std::vector<bf16> dx_second = d_dx.download();

  const std::vector<float> dsum0 = random_f32_values(C, seed + 5);
  DeviceArray<float> d_dsum(dsum0);
  d_dw.upload(dw0), d_dx.poison();
  cuda::rmsnorm_backward(d_dx.get(), d_dw.get(), d_dh.get(), dresidual, d_x.get(), d_w.get(), d_rstd.get(), N, C,
                         ws.get(), nullptr, d_dsum.get());
  run.expect_bitwise("dx with the column sums", d_dx.download(), dx_second);
  run.expect_bitwise("dw with the column sums", d_dw.download(), dw_got);
  std::vector<double> dsum(dsum0.begin(), dsum0.end());
  for (int r = 0; r < N; ++r)
    for (int c = 0; c < C; ++c) dsum[static_cast<size_t>(c)] += as_double(dx_second[static_cast<size_t>(r) * C + c]);
  run.expect_close("dx column sums", d_dsum.download(), dsum, DType::f32, kF32SumTol);
}

// fp32, on the forward's outputs as the model runs it: x `seed`, delta + 1, w + 2, dh + 3, dw0 + 4,
// dsum0 + 5; the kernel's own x_out and rstd (the forward row checks them), dresidual = delta.
void backward_f32(const OpRun& run, int N, int C, bool residual, uint64_t seed) {
  const size_t n = static_cast<size_t>(N) * C;
  const std::vector<float> x = random_f32_values(n, seed), delta = random_f32_values(n, seed + 1);
  const std::vector<float> w = random_f32_values(C, seed + 2), dh = random_f32_values(n, seed + 3);
  const std::vector<float> dw0 = random_f32_values(C, seed + 4), dsum0 = random_f32_values(C, seed + 5);
  DeviceArray<float> d_x(x), d_delta(delta), d_w(w), d_xout(n), d_h(n), d_rstd(N), d_dh(dh), d_dx(n), d_dw(dw0),
      d_dsum(dsum0);
  DeviceArray<char> ws(rmsnorm_backward_workspace_bytes(N, C));
  cuda::residual_rmsnorm_forward(residual ? d_xout.get() : nullptr, d_h.get(), d_rstd.get(), d_x.get(),
                                 residual ? d_delta.get() : nullptr, d_w.get(), N, C, kEps, nullptr);
  const std::vector<float> xin = residual ? d_xout.download() : x, rstd_got = d_rstd.download();
  DeviceArray<float> d_xin(xin);
  d_dx.poison();
  cuda::rmsnorm_backward(d_dx.get(), d_dw.get(), d_dh.get(), residual ? d_delta.get() : nullptr, d_xin.get(),
                         d_w.get(), d_rstd.get(), N, C, ws.get(), nullptr, d_dsum.get());
  std::vector<double> dx(n), dw(dw0.begin(), dw0.end()), dh_d(dh.begin(), dh.end()), x_d(xin.begin(), xin.end());
  const std::vector<double> w_d(w.begin(), w.end()), rstd_f(rstd_got.begin(), rstd_got.end());
  cpu::rmsnorm_backward(dx.data(), dw.data(), dh_d.data(), x_d.data(), w_d.data(), rstd_f.data(), N, C);
  if (residual)
    for (size_t i = 0; i < n; ++i) dx[i] += delta[i];
  std::vector<double> dsum(dsum0.begin(), dsum0.end());
  for (int r = 0; r < N; ++r)
    for (int c = 0; c < C; ++c) dsum[static_cast<size_t>(c)] += dx[static_cast<size_t>(r) * C + c];
  run.expect_close("dx", d_dx.download(), dx, DType::f32, kF32SumTol);
  run.expect_close("dw", d_dw.download(), dw, DType::f32, kF32SumTol);
  run.expect_close("dx column sums", d_dsum.download(), dsum, DType::f32, kF32SumTol);
}

}  // namespace

OpCase residual_rmsnorm_forward(DType d, int N, int C, bool residual, uint64_t seed) {
  return cuda_case("residual_rmsnorm_forward", d, norm_shape(N, C), residual ? "residual" : "", [=](const OpRun& run) {
    if (d == DType::bf16) forward_bf16(run, N, C, residual, seed);
    else forward_f32(run, N, C, residual, seed);
  });
}

OpCase rmsnorm_backward(DType d, int N, int C, bool residual, uint64_t seed) {
  return cuda_case("rmsnorm_backward", d, norm_shape(N, C), residual ? "residual" : "", [=](const OpRun& run) {
    if (d == DType::bf16) backward_bf16(run, N, C, residual, seed);
    else backward_f32(run, N, C, residual, seed);
  });
}

// dx aliasing dresidual (dx = norm'(dh) + dx, the way the step accumulates the residual gradient):
// the same bits as into a separate dx.
OpCase rmsnorm_backward_in_place_residual(int N, int C) {
  return cuda_case("rmsnorm_backward", DType::bf16, norm_shape(N, C), "residual in place", [=](const OpRun& run) {
    const size_t n = static_cast<size_t>(N) * C;
    const std::vector<float> x = random_bf16_values(n, 11), dh = random_bf16_values(n, 12);
    const std::vector<float> dres = random_bf16_values(n, 13), w = random_bf16_values(C, 14);
    const std::vector<float> rstd(N, 0.9f);
    DeviceArray<bf16> d_x(to_bf16(x)), d_dh(to_bf16(dh)), d_w(to_bf16(w)), d_inout(to_bf16(dres)), d_dx(n);
    DeviceArray<bf16> d_dres(to_bf16(dres));
    DeviceArray<float> d_rstd(rstd), d_dw(std::vector<float>(C, 0.f)), d_dw2(std::vector<float>(C, 0.f));
    DeviceArray<char> ws(rmsnorm_backward_workspace_bytes(N, C));
    d_dx.poison();
    cuda::rmsnorm_backward(d_dx.get(), d_dw.get(), d_dh.get(), d_dres.get(), d_x.get(), d_w.get(), d_rstd.get(), N,
                           C, ws.get(), nullptr);
    cuda::rmsnorm_backward(d_inout.get(), d_dw2.get(), d_dh.get(), d_inout.get(), d_x.get(), d_w.get(), d_rstd.get(),
                           N, C, ws.get(), nullptr);
    run.expect_bitwise("dx in place", d_inout.download(), d_dx.download());
  });
}

}  // namespace pylon::cuda::testing

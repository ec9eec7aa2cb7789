// The cuBLASLt GEMM and the linear layer against fp64 CPU GEMMs on the bf16-rounded operands; the
// fp32-operand GEMM on fp32 operands.
#include <gtest/gtest.h>

#include <cmath>

#include "ops/cpu/gemm.h"
#include "ops/cpu/ops.h"
#include "ops/cuda/gemm.h"
#include "ops/cuda/linear.h"
#include "support/cuda_test_util.h"

namespace pylon::cuda {
namespace {

using namespace pylon::cuda::testing;

// fp32 accumulation over K products in the tensor cores' order, not the reference's: each element
// may also move by 2^-17 of Σ|alpha·a·b| + |beta·c| (the bound's scale; a wrong index moves it O(1)).
constexpr double kAccumulationSlack = 1.0 / (1 << 17);

std::vector<double> as_doubles(const std::vector<float>& v) { return {v.begin(), v.end()}; }
std::vector<double> abs_of(std::vector<double> v) {
  for (double& x : v) x = std::fabs(x);
  return v;
}

// ref (M, N) and the slack for C = alpha·op(A)·op(B) + beta·C0, by the loop reference or BLAS.
struct Reference {
  std::vector<double> value, slack;
};
Reference reference(bool ta, bool tb, int M, int N, int K, double alpha, const std::vector<float>& A,
                    const std::vector<float>& B, double beta, const std::vector<float>& C0, bool loops) {
  auto gemm = loops ? cpu::gemm_reference<double> : cpu::gemm<double>;
  const int lda = ta ? M : K, ldb = tb ? K : N;
  Reference r{as_doubles(C0), abs_of(as_doubles(C0))};
  const std::vector<double> a = as_doubles(A), b = as_doubles(B);
  gemm(ta, tb, M, N, K, alpha, a.data(), lda, b.data(), ldb, beta, r.value.data(), N);
  gemm(ta, tb, M, N, K, std::fabs(alpha), abs_of(a).data(), lda, abs_of(b).data(), ldb, std::fabs(beta),
       r.slack.data(), N);
  for (double& s : r.slack) s *= kAccumulationSlack;
  return r;
}

void check_gemm(bool ta, bool tb, int M, int N, int K, GemmOut out, float beta, Gemm& gemm, uint64_t seed) {
  const float alpha = 0.75f;
  const std::vector<float> A = random_bf16_values(static_cast<size_t>(M) * K, seed);
  const std::vector<float> B = random_bf16_values(static_cast<size_t>(K) * N, seed + 1);
  std::vector<float> C0 = random_bf16_values(static_cast<size_t>(M) * N, seed + 2);
  DeviceArray<bf16> d_A(to_bf16(A)), d_B(to_bf16(B)), d_Cb(to_bf16(C0));
  DeviceArray<float> d_Cf(C0);
  if (beta == 0.f) d_Cb.poison(), d_Cf.poison();  // beta 0 must not read C (NaN · 0 = NaN)
  const bool f32 = out == GemmOut::kF32;
  void* C = f32 ? static_cast<void*>(d_Cf.get()) : static_cast<void*>(d_Cb.get());
  gemm.run(ta, tb, M, N, K, alpha, d_A.get(), ta ? M : K, d_B.get(), tb ? K : N, beta, C, out, N, nullptr, nullptr);
  Reference ref = reference(ta, tb, M, N, K, alpha, A, B, beta, C0, true);
  if (!f32 && beta != 0.f) {
    // cuBLASLt rounds alpha·op(A)·op(B) to bf16 before adding beta·C (seen on the H200 with every
    // algorithm its heuristic offered, at 96x80x136 and 512³: errors of ~2^-9·|alpha·AB| where
    // the sum cancels): one more bf16 rounding of the product, allowed as up to one bf16 ulp of it.
    const Reference product = reference(ta, tb, M, N, K, alpha, A, B, 0.0, C0, true);
    for (size_t i = 0; i < ref.slack.size(); ++i) ref.slack[i] += std::fabs(product.value[i]) / 256;
  }
  const std::vector<float> got = f32 ? d_Cf.download() : to_float(d_Cb.download());
  const std::string what = std::string("gemm ") + (ta ? "T" : "N") + (tb ? "T" : "N") + " M=" + std::to_string(M) +
                           " N=" + std::to_string(N) + " K=" + std::to_string(K) + (f32 ? " f32" : " bf16") +
                           " beta=" + std::to_string(beta);
  EXPECT_TRUE(all_close(got, ref.value, f32 ? kF32Tol : kBf16Tol, what, &ref.slack));
}

TEST(CudaGemm, AllTransposesOutputsAndBetas) {
  PYLON_SKIP_WITHOUT_CUDA();
  Gemm gemm;
  uint64_t seed = 1;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (GemmOut out : {GemmOut::kBf16, GemmOut::kF32})
        for (float beta : {0.f, 1.f}) {
          check_gemm(ta, tb, 96, 80, 136, out, beta, gemm, seed += 3);
          check_gemm(ta, tb, 67, 45, 129, out, beta, gemm, seed += 3);  // odd strides
        }
}

TEST(CudaGemm, LinearForwardWithBias) {
  PYLON_SKIP_WITHOUT_CUDA();
  Gemm gemm;
  for (auto [N, I, O] : {std::array{7, 129, 45}, std::array{256, 2048, 6144}}) {
    const std::vector<float> x = random_bf16_values(static_cast<size_t>(N) * I, 40);
    const std::vector<float> W = random_bf16_values(static_cast<size_t>(O) * I, 41, 0.05f);
    const std::vector<float> b = random_bf16_values(O, 42);
    DeviceArray<bf16> d_x(to_bf16(x)), d_W(to_bf16(W)), d_b(to_bf16(b)), d_out(static_cast<size_t>(N) * O);
    d_out.poison();
    linear_forward(gemm, d_out.get(), d_x.get(), d_W.get(), d_b.get(), N, I, O, nullptr);
    // out = x·Wᵀ (+ b per column: beta·C0 with C0 = broadcast b, beta 1).
    std::vector<float> C0(static_cast<size_t>(N) * O);
    for (size_t i = 0; i < C0.size(); ++i) C0[i] = b[i % static_cast<size_t>(O)];
    const Reference ref = reference(false, true, N, O, I, 1.0, x, W, 1.0, C0, false);
    EXPECT_TRUE(all_close(to_float(d_out.download()), ref.value, kBf16Tol,
                          "linear_forward N=" + std::to_string(N) + " I=" + std::to_string(I) + " O=" + std::to_string(O),
                          &ref.slack));
  }
}

TEST(CudaGemm, LinearBackward) {
  PYLON_SKIP_WITHOUT_CUDA();
  Gemm gemm;
  for (auto [N, I, O, beta] : {std::array{7, 129, 45, 1}, std::array{8192, 2048, 256, 0}, std::array{512, 256, 2048, 1}}) {
    const std::vector<float> x = random_bf16_values(static_cast<size_t>(N) * I, 50);
    const std::vector<float> W = random_bf16_values(static_cast<size_t>(O) * I, 51, 0.05f);
    const std::vector<float> dout = random_bf16_values(static_cast<size_t>(N) * O, 52);
    const std::vector<float> dW0 = random_f32_values(static_cast<size_t>(O) * I, 53), db0 = random_f32_values(O, 54);
    DeviceArray<bf16> d_x(to_bf16(x)), d_W(to_bf16(W)), d_dout(to_bf16(dout)), d_din(static_cast<size_t>(N) * I);
    DeviceArray<float> d_dW(dW0), d_db(db0);
    DeviceArray<char> ws(linear_backward_workspace_bytes(N, O));
    d_din.poison();
    if (beta == 0) d_dW.poison();
    linear_backward(gemm, d_din.get(), d_dW.get(), static_cast<float>(beta), d_db.get(), d_dout.get(), d_x.get(),
                    d_W.get(), N, I, O, ws.get(), nullptr);
    const std::string what = " N=" + std::to_string(N) + " I=" + std::to_string(I) + " O=" + std::to_string(O);
    const Reference din = reference(false, false, N, I, O, 1.0, dout, W, 0.0, std::vector<float>(static_cast<size_t>(N) * I), false);
    EXPECT_TRUE(all_close(to_float(d_din.download()), din.value, kBf16Tol, "din" + what, &din.slack));
    const Reference dW = reference(true, false, O, I, N, 1.0, dout, x, beta, dW0, false);
    EXPECT_TRUE(all_close(d_dW.download(), dW.value, kF32Tol, "dW" + what, &dW.slack));
    std::vector<double> db(db0.begin(), db0.end());
    for (int n = 0; n < N; ++n)
      for (int o = 0; o < O; ++o) db[o] += dout[static_cast<size_t>(n) * O + o];
    // db: fp32 sums over N rows in another order than the reference: ~10x the fp32 default.
    EXPECT_TRUE(all_close(d_db.download(), db, Tolerance{1e-5, 1e-4}, "db" + what));
  }
}

// fp32 operands (the --dtype fp32 model), not bf16-rounded: TF32 would round them to 10-bit
// mantissas, an error of ~2^-11 per product (~6e-3 of Σ|a·b|/sqrt(K) here), far above the slack of
// 2^-17·Σ|a·b| (fp32 accumulation over K <= 136 terms), so the test tells fp32 from TF32.
void check_gemm_f32(bool ta, bool tb, int M, int N, int K, float beta, bool bias, Gemm& gemm, uint64_t seed) {
  const float alpha = beta == 0.f ? 1.f : 0.75f;
  const std::vector<float> A = random_f32_values(static_cast<size_t>(M) * K, seed);
  const std::vector<float> B = random_f32_values(static_cast<size_t>(K) * N, seed + 1);
  const std::vector<float> C0 = random_f32_values(static_cast<size_t>(M) * N, seed + 2);
  const std::vector<float> b = random_f32_values(N, seed + 3);
  DeviceArray<float> d_A(A), d_B(B), d_C(C0), d_b(b);
  if (beta == 0.f) d_C.poison();  // beta 0 must not read C
  gemm.run(ta, tb, M, N, K, alpha, d_A.get(), ta ? M : K, d_B.get(), tb ? K : N, beta, d_C.get(), N,
           bias ? d_b.get() : nullptr, nullptr);
  // The bias is beta·C0 with C0 = the broadcast bias and beta 1 (bias is tested with beta 0 only).
  std::vector<float> init = C0;
  if (bias)
    for (size_t i = 0; i < init.size(); ++i) init[i] = b[i % static_cast<size_t>(N)];
  const Reference ref = reference(ta, tb, M, N, K, alpha, A, B, bias ? 1.0 : beta, init, true);
  const std::string what = std::string("gemm fp32 ") + (ta ? "T" : "N") + (tb ? "T" : "N") + " M=" +
                           std::to_string(M) + " N=" + std::to_string(N) + " K=" + std::to_string(K) +
                           " beta=" + std::to_string(beta) + (bias ? " bias" : "");
  EXPECT_TRUE(all_close(d_C.download(), ref.value, kF32Tol, what, &ref.slack));
}

TEST(CudaGemm, Fp32AllTransposesBetasAndBias) {
  PYLON_SKIP_WITHOUT_CUDA();
  Gemm gemm;
  uint64_t seed = 100;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      for (float beta : {0.f, 1.f}) {
        check_gemm_f32(ta, tb, 96, 80, 136, beta, false, gemm, seed += 4);
        check_gemm_f32(ta, tb, 67, 45, 129, beta, false, gemm, seed += 4);  // odd strides
      }
      check_gemm_f32(ta, tb, 67, 45, 129, 0.f, true, gemm, seed += 4);
    }
}

}  // namespace
}  // namespace pylon::cuda

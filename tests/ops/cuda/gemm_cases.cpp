// CUDA rows: the cuBLASLt GEMM and the linear layer against fp64 CPU GEMMs on the same operands
// (bf16-rounded, or fp32 for the fp32-operand GEMM).
#include <cmath>

#include "ops/cpu/gemm.h"
#include "ops/cpu/ops.h"
#include "ops/cuda/cuda_op_cases.h"
#include "ops/cuda/gemm.h"
#include "ops/cuda/linear.h"

namespace pylon::cuda::testing {
namespace {

// fp32 accumulation over K products in the tensor cores' order, not the reference's: each element
// may also move by 2^-17 of Σ|alpha·a·b| + |beta·c| (the bound's scale; a wrong index moves it O(1)).
// fp32 operands: TF32 would round them to 10-bit mantissas, an error of ~2^-11 per product (~6e-3
// of Σ|a·b|/sqrt(K) here), far above this slack (K <= 136), so the rows tell fp32 from TF32.
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

// bf16 operands, C in out_dtype: alpha 0.75; A `seed`, B + 1, C0 + 2.
void gemm_bf16(const OpRun& run, bool ta, bool tb, int M, int N, int K, DType out_dtype, float beta, uint64_t seed) {
  const float alpha = 0.75f;
  const std::vector<float> A = random_bf16_values(static_cast<size_t>(M) * K, seed);
  const std::vector<float> B = random_bf16_values(static_cast<size_t>(K) * N, seed + 1);
  const std::vector<float> C0 = random_bf16_values(static_cast<size_t>(M) * N, seed + 2);
  DeviceArray<bf16> d_A(to_bf16(A)), d_B(to_bf16(B)), d_Cb(to_bf16(C0));
  DeviceArray<float> d_Cf(C0);
  if (beta == 0.f) d_Cb.poison(), d_Cf.poison();  // beta 0 must not read C (NaN · 0 = NaN)
  const bool f32 = out_dtype == DType::f32;
  void* C = f32 ? static_cast<void*>(d_Cf.get()) : static_cast<void*>(d_Cb.get());
  Gemm g;
  g.run(ta, tb, M, N, K, alpha, d_A.get(), ta ? M : K, d_B.get(), tb ? K : N, beta, C,
        f32 ? GemmOut::kF32 : GemmOut::kBf16, N, nullptr, nullptr);
  Reference ref = reference(ta, tb, M, N, K, alpha, A, B, beta, C0, true);
  if (!f32 && beta != 0.f) {
    // cuBLASLt rounds alpha·op(A)·op(B) to bf16 before adding beta·C (seen on the H200 with every
    // algorithm its heuristic offered, at 96x80x136 and 512³: errors of ~2^-9·|alpha·AB| where
    // the sum cancels): one more bf16 rounding of the product, allowed as up to one bf16 ulp of it.
    const Reference product = reference(ta, tb, M, N, K, alpha, A, B, 0.0, C0, true);
    for (size_t i = 0; i < ref.slack.size(); ++i) ref.slack[i] += std::fabs(product.value[i]) / 256;
  }
  const std::vector<float> got = f32 ? d_Cf.download() : to_float(d_Cb.download());
  run.expect_close("C", got, ref.value, out_dtype, torch_tolerance(out_dtype), ref.slack);
}

// fp32 operands: alpha 1 (beta 0) or 0.75; A `seed`, B + 1, C0 + 2, bias + 3. The bias is tested
// with beta 0: it is beta·C0 with C0 the broadcast bias and beta 1 in the reference.
void gemm_f32(const OpRun& run, bool ta, bool tb, int M, int N, int K, float beta, bool bias, uint64_t seed) {
  const float alpha = beta == 0.f ? 1.f : 0.75f;
  const std::vector<float> A = random_f32_values(static_cast<size_t>(M) * K, seed);
  const std::vector<float> B = random_f32_values(static_cast<size_t>(K) * N, seed + 1);
  const std::vector<float> C0 = random_f32_values(static_cast<size_t>(M) * N, seed + 2);
  const std::vector<float> b = random_f32_values(N, seed + 3);
  DeviceArray<float> d_A(A), d_B(B), d_C(C0), d_b(b);
  if (beta == 0.f) d_C.poison();  // beta 0 must not read C
  Gemm g;
  g.run(ta, tb, M, N, K, alpha, d_A.get(), ta ? M : K, d_B.get(), tb ? K : N, beta, d_C.get(), N,
        bias ? d_b.get() : nullptr, nullptr);
  std::vector<float> init = C0;
  if (bias)
    for (size_t i = 0; i < init.size(); ++i) init[i] = b[i % static_cast<size_t>(N)];
  const Reference ref = reference(ta, tb, M, N, K, alpha, A, B, bias ? 1.0 : beta, init, true);
  run.expect_close("C", d_C.download(), ref.value, DType::f32, torch_tolerance(DType::f32), ref.slack);
}

}  // namespace

OpCase gemm(DType operands, DType out_dtype, bool ta, bool tb, int M, int N, int K, float beta, bool bias,
            uint64_t seed) {
  std::string variant = std::string(ta ? "T" : "N") + (tb ? "T" : "N") + " beta=" + std::to_string(static_cast<int>(beta));
  if (operands == DType::bf16) variant += std::string(" out ") + ::pylon::testing::dtype_name(out_dtype);
  if (bias) variant += " bias";
  return cuda_case("gemm", operands, shape_of({{"M", M}, {"N", N}, {"K", K}}), variant, [=](const OpRun& run) {
    if (operands == DType::bf16) gemm_bf16(run, ta, tb, M, N, K, out_dtype, beta, seed);
    else gemm_f32(run, ta, tb, M, N, K, beta, bias, seed);
  });
}

// out = x·Wᵀ + b (the reference: beta·C0 with C0 = broadcast b, beta 1). x seed 40, W 41 (·0.05), b 42.
OpCase linear_forward(int N, int I, int O) {
  return cuda_case("linear_forward", DType::bf16, shape_of({{"N", N}, {"I", I}, {"O", O}}), "bias",
                   [=](const OpRun& run) {
    const std::vector<float> x = random_bf16_values(static_cast<size_t>(N) * I, 40);
    const std::vector<float> W = random_bf16_values(static_cast<size_t>(O) * I, 41, 0.05f);
    const std::vector<float> b = random_bf16_values(O, 42);
    DeviceArray<bf16> d_x(to_bf16(x)), d_W(to_bf16(W)), d_b(to_bf16(b)), d_out(static_cast<size_t>(N) * O);
    d_out.poison();
    Gemm g;
    cuda::linear_forward(g, d_out.get(), d_x.get(), d_W.get(), d_b.get(), N, I, O, nullptr);
    std::vector<float> C0(static_cast<size_t>(N) * O);
    for (size_t i = 0; i < C0.size(); ++i) C0[i] = b[i % static_cast<size_t>(O)];
    const Reference ref = reference(false, true, N, O, I, 1.0, x, W, 1.0, C0, false);
    run.expect_close("out", to_float(d_out.download()), ref.value, DType::bf16, torch_tolerance(DType::bf16),
                     ref.slack);
  });
}

// din, dW (accumulated with dW_beta; poisoned where 0) and db. x seed 50, W 51 (·0.05), dout 52,
// dW0 53, db0 54.
OpCase linear_backward(int N, int I, int O, float dW_beta) {
  return cuda_case("linear_backward", DType::bf16, shape_of({{"N", N}, {"I", I}, {"O", O}}),
                   "dW_beta=" + std::to_string(static_cast<int>(dW_beta)), [=](const OpRun& run) {
    const std::vector<float> x = random_bf16_values(static_cast<size_t>(N) * I, 50);
    const std::vector<float> W = random_bf16_values(static_cast<size_t>(O) * I, 51, 0.05f);
    const std::vector<float> dout = random_bf16_values(static_cast<size_t>(N) * O, 52);
    const std::vector<float> dW0 = random_f32_values(static_cast<size_t>(O) * I, 53), db0 = random_f32_values(O, 54);
    DeviceArray<bf16> d_x(to_bf16(x)), d_W(to_bf16(W)), d_dout(to_bf16(dout)), d_din(static_cast<size_t>(N) * I);
    DeviceArray<float> d_dW(dW0), d_db(db0);
    DeviceArray<char> ws(linear_backward_workspace_bytes(N, O));
    d_din.poison();
    if (dW_beta == 0.f) d_dW.poison();
    Gemm g;
    cuda::linear_backward(g, d_din.get(), d_dW.get(), dW_beta, d_db.get(), d_dout.get(), d_x.get(), d_W.get(), N, I, O,
                          ws.get(), nullptr);
    const Reference din = reference(false, false, N, I, O, 1.0, dout, W, 0.0,
                                    std::vector<float>(static_cast<size_t>(N) * I), false);
    run.expect_close("din", to_float(d_din.download()), din.value, DType::bf16, torch_tolerance(DType::bf16),
                     din.slack);
    const Reference dW = reference(true, false, O, I, N, 1.0, dout, x, dW_beta, dW0, false);
    run.expect_close("dW", d_dW.download(), dW.value, DType::f32, torch_tolerance(DType::f32), dW.slack);
    std::vector<double> db(db0.begin(), db0.end());
    for (int n = 0; n < N; ++n)
      for (int o = 0; o < O; ++o) db[o] += dout[static_cast<size_t>(n) * O + o];
    // db: fp32 sums over N rows in another order than the reference: ~10x the fp32 default.
    run.expect_close("db", d_db.download(), db, DType::f32, Tolerance{.rtol = 1e-5, .atol = 1e-4});
  });
}

}  // namespace pylon::cuda::testing

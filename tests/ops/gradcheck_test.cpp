// Every CPU op's backward against central finite differences, in fp64, on fresh random inputs
// at awkward sizes. Loss = Σ out ∘ R for a random R, so dout = R.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "ops/cpu/gemm.h"
#include "ops/cpu/ops.h"
#include "support/op_check.h"

namespace pylon::cpu {
namespace {

using Vec = std::vector<double>;

Vec random_vec(size_t n, std::mt19937& g, double scale = 1.0) {
  std::normal_distribution<double> d(0.0, scale);
  Vec v(n);
  for (auto& x : v) x = d(g);
  return v;
}

double dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Compares analytic[i] with (f(x+h) − f(x−h)) / 2h for every element of x, by the op checker.
// fp64 central differences with h = 1e-6 are accurate to about 1e-8 relative here.
void expect_gradient(const std::function<double()>& f, Vec& x, const Vec& analytic, const std::string& op, const char* what) {
  ASSERT_EQ(x.size(), analytic.size());
  const double h = 1e-6;
  Vec numeric(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double saved = x[i];
    x[i] = saved + h;
    const double up = f();
    x[i] = saved - h;
    const double down = f();
    x[i] = saved;
    numeric[i] = (up - down) / (2 * h);
  }
  const pylon::testing::CheckLabel label{op, "cpu", "f64", std::to_string(x.size()) + " values", "finite differences", what};
  EXPECT_TRUE(all_close(label, analytic, numeric, pylon::testing::DType::f64,
                        pylon::testing::Tolerance{.rtol = 1e-5, .atol = 1e-6}));
}

TEST(GradCheck, Linear) {
  std::mt19937 g(1);
  const int N = 5, I = 7, O = 3;
  Vec x = random_vec(N * I, g), W = random_vec(O * I, g), b = random_vec(O, g), R = random_vec(N * O, g);
  Vec out(N * O);
  auto f = [&] { linear_forward(out.data(), x.data(), W.data(), b.data(), N, I, O); return dot(out, R); };
  Vec dx(N * I), dW(O * I, 0.0), db(O, 0.0);
  linear_backward(dx.data(), dW.data(), db.data(), R.data(), x.data(), W.data(), N, I, O);
  expect_gradient(f, x, dx, "linear_backward", "dx");
  expect_gradient(f, W, dW, "linear_backward", "dW");
  expect_gradient(f, b, db, "linear_backward", "db");
}

TEST(GradCheck, RmsNorm) {
  std::mt19937 g(2);
  const int N = 4, C = 9;
  Vec x = random_vec(N * C, g), w = random_vec(C, g), R = random_vec(N * C, g);
  Vec out(N * C), rstd(N);
  auto f = [&] { rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, 1e-5); return dot(out, R); };
  f();
  Vec dx(N * C), dw(C, 0.0);
  rmsnorm_backward(dx.data(), dw.data(), R.data(), x.data(), w.data(), rstd.data(), N, C);
  expect_gradient(f, x, dx, "rmsnorm_backward", "dx");
  expect_gradient(f, w, dw, "rmsnorm_backward", "dw");
}

void check_attention(bool causal, bool rope) {
  std::mt19937 g(causal ? 3 : 4);
  const int B = 2, T = 5, H = 3, D = 12;  // hd = 4
  Vec qkv = random_vec(B * T * 3 * D, g), R = random_vec(B * T * D, g);
  Vec out(B * T * D), probs(B * H * T * T), rotated;
  auto f = [&] {
    rotated = qkv;
    if (rope) rope_forward(rotated.data(), B, T, D, H, 10000.0, 0);
    attention_forward(out.data(), probs.data(), rotated.data(), B, T, D, H, causal);
    return dot(out, R);
  };
  f();
  Vec dqkv(qkv.size());
  attention_backward(dqkv.data(), R.data(), rotated.data(), probs.data(), B, T, D, H);
  if (rope) rope_backward(dqkv.data(), B, T, D, H, 10000.0, 0);
  expect_gradient(f, qkv, dqkv, std::string(rope ? "rope_backward of attention_backward" : "attention_backward") + (causal ? " causal" : ""), "dqkv");
}

TEST(GradCheck, AttentionBidirectional) { check_attention(false, false); }
TEST(GradCheck, AttentionCausal) { check_attention(true, false); }
TEST(GradCheck, AttentionCausalRope) { check_attention(true, true); }

TEST(GradCheck, Silu) {
  std::mt19937 g(5);
  const int n = 17;
  Vec x = random_vec(n, g, 3.0), R = random_vec(n, g), out(n);
  auto f = [&] { silu_forward(out.data(), x.data(), n); return dot(out, R); };
  Vec dx(n);
  silu_backward(dx.data(), R.data(), x.data(), n);
  expect_gradient(f, x, dx, "silu_backward", "dx");
}

TEST(GradCheck, CrossEntropy) {
  std::mt19937 g(6);
  const int N = 4, V = 11;
  Vec z = random_vec(N * V, g, 2.0), losses(N), probs(N * V), R = random_vec(N, g);
  std::vector<int32_t> targets = {3, 0, 10, 7};
  auto f = [&] { cross_entropy_forward(losses.data(), probs.data(), z.data(), targets.data(), N, V); return dot(losses, R); };
  f();
  // Per-row scales R[n]: apply the op with scale 1 and multiply rows.
  Vec dz(N * V);
  cross_entropy_backward(dz.data(), probs.data(), targets.data(), N, V, 1.0);
  for (int n = 0; n < N; ++n)
    for (int v = 0; v < V; ++v) dz[n * V + v] *= R[n];
  expect_gradient(f, z, dz, "cross_entropy_backward", "dlogits");
}

TEST(GradCheck, Embedding) {
  std::mt19937 g(7);
  const int V = 6, C = 5, N = 7;
  Vec table = random_vec(V * C, g), R = random_vec(N * C, g), out(N * C);
  std::vector<int32_t> ids = {1, 4, 1, 0, 5, 4, 4};  // repeats: the scatter must add
  auto f = [&] { embedding_forward(out.data(), ids.data(), table.data(), N, C); return dot(out, R); };
  Vec dt(V * C, 0.0);
  embedding_backward(dt.data(), R.data(), ids.data(), N, C);
  expect_gradient(f, table, dt, "embedding_backward", "dtable");
}

TEST(Rope, IsARotationAndPositionZeroIsIdentity) {
  std::mt19937 g(8);
  const int B = 1, T = 4, H = 2, D = 8;
  Vec qkv = random_vec(B * T * 3 * D, g), r = qkv;
  rope_forward(r.data(), B, T, D, H, 10000.0, 0);
  using pylon::testing::CheckLabel, pylon::testing::DType, pylon::testing::kExact, pylon::testing::Tolerance;
  const std::string shape = "B=1 T=4 D=8 H=2";
  const Vec first(r.begin(), r.begin() + 3 * D), first_in(qkv.begin(), qkv.begin() + 3 * D);
  EXPECT_TRUE(all_close(CheckLabel{"rope_forward", "cpu", "f64", shape, "position 0", "qkv"}, first, first_in,
                        DType::f64, kExact));
  Vec v, v_in;
  for (int t = 0; t < T; ++t)
    for (int c = 2 * D; c < 3 * D; ++c) v.push_back(r[t * 3 * D + c]), v_in.push_back(qkv[t * 3 * D + c]);
  EXPECT_TRUE(all_close(CheckLabel{"rope_forward", "cpu", "f64", shape, "", "v"}, v, v_in, DType::f64, kExact));
  rope_backward(r.data(), B, T, D, H, 10000.0, 0);  // inverse rotation
  EXPECT_TRUE(all_close(CheckLabel{"rope_backward", "cpu", "f64", shape, "of rope_forward", "qkv"}, r, qkv, DType::f64,
                        Tolerance{.rtol = 0, .atol = 1e-12}));
}

TEST(Gemm, BlasMatchesReferenceLoops) {
  std::mt19937 g(9);
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      const int M = 13, N = 7, K = 19;
      std::vector<float> A(M * K), B(K * N), C1(M * N), C2(M * N);
      std::normal_distribution<float> d;
      for (auto& x : A) x = d(g);
      for (auto& x : B) x = d(g);
      for (size_t i = 0; i < C1.size(); ++i) C1[i] = C2[i] = d(g);
      const int lda = ta ? M : K, ldb = tb ? K : N;
      gemm<float>(ta, tb, M, N, K, 0.5f, A.data(), lda, B.data(), ldb, 2.f, C1.data(), N);
      gemm_reference<float>(ta, tb, M, N, K, 0.5f, A.data(), lda, B.data(), ldb, 2.f, C2.data(), N);
      // fp32, K = 19 terms: rtol 1e-5 covers the different summation orders.
      const pylon::testing::CheckLabel label{"gemm", "cpu", "f32", "M=13 N=7 K=19",
                                             std::string(ta ? "T" : "N") + (tb ? "T" : "N") + " BLAS against the loops",
                                             "C"};
      EXPECT_TRUE(all_close(label, C1, C2, pylon::testing::DType::f32,
                            pylon::testing::Tolerance{.rtol = 1e-5, .atol = 1e-5}));
    }
}

}  // namespace
}  // namespace pylon::cpu

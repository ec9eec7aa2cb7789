// Known answers for the CPU reference ops (the specification every kernel is compared with):
// small cases whose results are worked out by hand, so that a reference that is wrong in the
// same way as a kernel cannot pass with it. Compared by the op checker (support/op_check.h).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "ops/cpu/ops.h"
#include "support/op_check.h"

namespace pylon::cpu {
namespace {

using pylon::testing::CheckLabel;
using pylon::testing::DType;
using pylon::testing::kExact;
using pylon::testing::Tolerance;
using Vec = std::vector<double>;

// Known answers in fp64: exact where the arithmetic is, else to 1e-13 relative of the printed
// constants (16-17 significant digits): libm's last ulp, and the logits shifted by 100 carry
// 2^-46 of 100 ≈ 1.4e-14 of rounding into the softmax.
constexpr Tolerance kUlps{.rtol = 1e-13, .atol = 1e-15};

CheckLabel label(const char* op, const std::string& shape, const char* output) {
  return {op, "cpu", "f64", shape, "known answer", output};
}

// x = (2, -2, 2, -2): mean(x²) = 4, rstd = 1/2, out = x/2 · w. x = (3, 4) with eps 3.5:
// mean(x²) + eps = 16, rstd = 1/4.
TEST(CpuKnownAnswer, RmsNorm) {
  const Vec x = {2, -2, 2, -2, 3, 4, 0, 0}, w = {1, 2, 3, 4};
  Vec out(4), rstd(1);
  rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), 1, 4, 0.0);
  EXPECT_TRUE(all_close(label("rmsnorm_forward", "N=1 C=4", "out"), out, Vec{1, -2, 3, -4}, DType::f64, kExact));
  EXPECT_TRUE(all_close(label("rmsnorm_forward", "N=1 C=4", "rstd"), rstd, Vec{0.5}, DType::f64, kExact));
  Vec out2(2), rstd2(1);
  const Vec w2 = {1, -2};
  rmsnorm_forward(out2.data(), rstd2.data(), x.data() + 4, w2.data(), 1, 2, 3.5);
  EXPECT_TRUE(all_close(label("rmsnorm_forward", "N=1 C=2 eps=3.5", "out"), out2, Vec{0.75, -2}, DType::f64, kExact));
  EXPECT_TRUE(all_close(label("rmsnorm_forward", "N=1 C=2 eps=3.5", "rstd"), rstd2, Vec{0.25}, DType::f64, kExact));
}

// Equal logits: p = 1/4 each, loss = ln 4, dlogits = p − onehot. Logits ln(1, 2, 3, 4) (+ 100: the
// same softmax): p = (0.1, 0.2, 0.3, 0.4), the loss at target 3 = −ln 0.4.
TEST(CpuKnownAnswer, SoftmaxAndCrossEntropy) {
  const std::string shape = "N=2 V=4";
  const Vec logits = {0, 0, 0, 0, 100 + std::log(1.0), 100 + std::log(2.0), 100 + std::log(3.0), 100 + std::log(4.0)};
  const std::vector<int32_t> targets = {2, 3};
  Vec losses(2), probs(8), dlogits(8);
  cross_entropy_forward(losses.data(), probs.data(), logits.data(), targets.data(), 2, 4);
  EXPECT_TRUE(all_close(label("cross_entropy_forward", shape, "losses"), losses,
                        Vec{1.3862943611198906, 0.916290731874155}, DType::f64, kUlps));
  EXPECT_TRUE(all_close(label("cross_entropy_forward", shape, "probs"), probs,
                        Vec{0.25, 0.25, 0.25, 0.25, 0.1, 0.2, 0.3, 0.4}, DType::f64, kUlps));
  cross_entropy_backward(dlogits.data(), probs.data(), targets.data(), 2, 4, 0.5);
  EXPECT_TRUE(all_close(label("cross_entropy_backward", shape + " scale=0.5", "dlogits"), dlogits,
                        Vec{0.125, 0.125, -0.375, 0.125, 0.05, 0.1, 0.15, -0.3}, DType::f64, kUlps));
}

// One token at position 2, D = 4, one head (hd 4): pair (x0, x2) turns by 2 rad, pair (x1, x3) by
// 2·10000^(−2/4) = 0.02 rad. q = k = (1, 0, 0, 1): (cos 2, −sin 0.02, sin 2, cos 0.02); v stays.
TEST(CpuKnownAnswer, RopeOfAKnownVector) {
  Vec qkv = {1, 0, 0, 1, 1, 0, 0, 1, 5, 6, 7, 8};
  rope_forward(qkv.data(), 1, 1, 4, 1, 10000.0, 2);
  const Vec turned = {-0.4161468365471424, -0.01999866669333308, 0.9092974268256817, 0.9998000066665778};
  Vec want = turned;
  want.insert(want.end(), turned.begin(), turned.end());
  want.insert(want.end(), {5, 6, 7, 8});
  EXPECT_TRUE(all_close(label("rope_forward", "B=1 T=1 D=4 H=1 pos=2", "qkv"), qkv, want, DType::f64, kUlps));
}

// One key: the softmax over it is 1, so out = v whatever q and k. Two keys with q = 0 (equal
// scores): out = the mean of the values; causal: the first query sees only its own key.
TEST(CpuKnownAnswer, AttentionWithOneKey) {
  const Vec one = {0.3, -1.2, 0.7, 2.0, /* k */ 1.5, 0.4, -0.6, 0.1, /* v */ 9, -8, 7, -6};
  Vec out(4), probs(2);
  attention_forward(out.data(), probs.data(), one.data(), 1, 1, 4, 2, false);
  EXPECT_TRUE(all_close(label("attention_forward", "B=1 T=1 D=4 H=2", "out"), out, Vec{9, -8, 7, -6}, DType::f64, kExact));
  const Vec two = {0, 0, 0, 0, 1, 2, 3, 4, 2, 4, 6, 8, /* row 2 */ 0, 0, 0, 0, -1, 5, 0, 2, 4, 0, -2, 10};
  Vec out2(8), probs2(8);
  attention_forward(out2.data(), probs2.data(), two.data(), 1, 2, 4, 2, false);
  EXPECT_TRUE(all_close(label("attention_forward", "B=1 T=2 D=4 H=2", "out"), out2, Vec{3, 2, 2, 9, 3, 2, 2, 9},
                        DType::f64, kUlps));
  attention_forward(out2.data(), probs2.data(), two.data(), 1, 2, 4, 2, true);
  EXPECT_TRUE(all_close(label("attention_forward", "B=1 T=2 D=4 H=2 causal", "out"), out2, Vec{2, 4, 6, 8, 3, 2, 2, 9},
                        DType::f64, kUlps));
}

// silu(x) = x·σ(x): silu(0) = 0, silu(1) = σ(1) = 0.7310585786300049, silu(−1) = −σ(−1);
// silu'(x) = σ(x)(1 + x(1 − σ(x))): 1/2 at 0, 0.9276705118714869 at 1, 0.07232948812851325 at −1.
TEST(CpuKnownAnswer, SiluAtZeroAndOne) {
  const Vec x = {0, 1, -1}, dy = {1, 1, 2};
  Vec y(3), dx(3);
  silu_forward(y.data(), x.data(), 3);
  silu_backward(dx.data(), dy.data(), x.data(), 3);
  EXPECT_TRUE(all_close(label("silu_forward", "n=3", "y"), y, Vec{0, 0.7310585786300049, -0.2689414213699951},
                        DType::f64, kUlps));
  EXPECT_TRUE(all_close(label("silu_backward", "n=3", "dx"), dx, Vec{0.5, 0.9276705118714869, 2 * 0.07232948812851325},
                        DType::f64, kUlps));
}

// out = x·Wᵀ + b with W = ((1, 2), (3, 4)), b = (0.5, −1); the embedding gathers rows and its
// backward adds a repeated id's rows.
TEST(CpuKnownAnswer, LinearAndEmbedding) {
  const Vec x = {1, 1, 2, -1}, W = {1, 2, 3, 4}, b = {0.5, -1};
  Vec out(4);
  linear_forward(out.data(), x.data(), W.data(), b.data(), 2, 2, 2);
  EXPECT_TRUE(all_close(label("linear_forward", "N=2 I=2 O=2", "out"), out, Vec{3.5, 6, 0.5, 1}, DType::f64, kExact));
  const Vec table = {1, 2, 3, 4, 5, 6};
  const std::vector<int32_t> ids = {2, 0, 2};
  Vec rows(6), dtable(6, 0.0);
  embedding_forward(rows.data(), ids.data(), table.data(), 3, 2);
  EXPECT_TRUE(all_close(label("embedding_forward", "N=3 C=2 V=3", "out"), rows, Vec{5, 6, 1, 2, 5, 6}, DType::f64, kExact));
  const Vec dout = {1, 2, 3, 4, 5, 6};
  embedding_backward(dtable.data(), dout.data(), ids.data(), 3, 2);
  EXPECT_TRUE(all_close(label("embedding_backward", "N=3 C=2 V=3", "dtable"), dtable, Vec{3, 4, 0, 0, 6, 8},
                        DType::f64, kExact));
}

}  // namespace
}  // namespace pylon::cpu

// AdamW, the deterministic sum of squares and the clipping coefficient against train/adamw.cpp.
#include <gtest/gtest.h>

#include <cmath>

#include "ops/cuda/adamw.h"
#include "ops/cuda/reduce.h"
#include "support/cuda_test_util.h"
#include "ops/cpu/adamw.h"

namespace pylon::cuda {
namespace {

using namespace pylon::cuda::testing;

// The step's constants where adamw_update reads them.
DeviceArray<AdamWConstants> constants(const AdamWConfig& c, int64_t step) {
  return DeviceArray<AdamWConstants>(
      std::vector<AdamWConstants>{adamw_constants(c.lr, c.beta1, c.beta2, c.eps, c.weight_decay, step)});
}

// offset 1 leaves the buffers 4-byte aligned: the scalar path.
void check_adamw(size_t n, size_t offset, int64_t step, bool scaled, bool bf16_copy, uint64_t seed) {
  std::vector<float> p = random_f32_values(n + offset, seed), m = random_f32_values(n + offset, seed + 1, 0.1f);
  std::vector<float> v = random_f32_values(n + offset, seed + 2, 0.01f), g = random_f32_values(n + offset, seed + 3);
  for (float& x : v) x = std::fabs(x);
  const float grad_scale = 0.37f;
  const AdamWConfig c{1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f};
  DeviceArray<float> d_p(p), d_m(m), d_v(v), d_g(g), d_scale(std::vector<float>{grad_scale});
  DeviceArray<bf16> d_pb(n + offset);
  d_pb.poison();
  const DeviceArray<AdamWConstants> k = constants(c, step);
  adamw_update(d_p.get() + offset, d_m.get() + offset, d_v.get() + offset, d_g.get() + offset,
               bf16_copy ? d_pb.get() + offset : nullptr, static_cast<int64_t>(n), k.get(),
               scaled ? d_scale.get() : nullptr, nullptr);

  if (scaled)
    for (float& x : g) x *= grad_scale;
  pylon::cpu::adamw_update(p.data() + offset, g.data() + offset, m.data() + offset, v.data() + offset, static_cast<int64_t>(n),
               c.lr, c, step);
  auto tail = [&](std::vector<float> x) { return std::vector<float>(x.begin() + static_cast<long>(offset), x.end()); };
  const std::string what = " n=" + std::to_string(n) + " step=" + std::to_string(step) + (offset ? " unaligned" : "");
  EXPECT_TRUE(all_close(tail(d_p.download()), tail(p), kF32Tol, "params" + what));
  EXPECT_TRUE(all_close(tail(d_m.download()), tail(m), kF32Tol, "m" + what));
  EXPECT_TRUE(all_close(tail(d_v.download()), tail(v), kF32Tol, "v" + what));
  if (bf16_copy) {
    std::vector<float> want = tail(p);
    for (float& x : want) x = round_bf16(x);
    EXPECT_TRUE(all_close(tail(to_float(d_pb.download())), want, kBf16Tol, "params_bf16" + what));
  }
}

TEST(CudaAdamW, MatchesCpu) {
  PYLON_SKIP_WITHOUT_CUDA();
  check_adamw(7, 0, 1, false, true, 1);
  check_adamw(1000003, 0, 1, true, true, 2);
  check_adamw(1000003, 0, 10, false, false, 3);
  check_adamw(1000003, 1, 3, true, true, 4);
  check_adamw(size_t{1} << 24, 0, 100, true, true, 5);
}

TEST(CudaAdamW, SumOfSquares) {
  PYLON_SKIP_WITHOUT_CUDA();
  for (size_t n : {size_t{7}, size_t{1000003}, size_t{1} << 26}) {
    const std::vector<float> x = random_f32_values(n + 1, n);
    DeviceArray<float> d_x(x), d_out(1);
    DeviceArray<char> ws(reduce_workspace_bytes(static_cast<int64_t>(n)));
    for (size_t offset : {size_t{0}, size_t{1}}) {
      d_out.poison();
      sum_of_squares(d_out.get(), d_x.get() + offset, static_cast<int64_t>(n), ws.get(), nullptr);
      const std::vector<float> got = d_out.download();
      const double ref = pylon::cpu::sum_of_squares(x.data() + offset, static_cast<int64_t>(n));
      EXPECT_TRUE(all_close(got, std::vector<double>{ref}, kF32Tol,
                            "sum_of_squares n=" + std::to_string(n) + (offset ? " unaligned" : "")));
      sum_of_squares(d_out.get(), d_x.get() + offset, static_cast<int64_t>(n), ws.get(), nullptr);
      EXPECT_TRUE(bitwise_equal(got, d_out.download())) << "sum_of_squares is not deterministic";
    }
    // accumulate: two buffers into one total.
    sum_of_squares(d_out.get(), d_x.get(), static_cast<int64_t>(n), ws.get(), nullptr);
    sum_of_squares(d_out.get(), d_x.get(), static_cast<int64_t>(n), ws.get(), nullptr, true);
    const double ref2 = 2 * pylon::cpu::sum_of_squares(x.data(), static_cast<int64_t>(n));
    EXPECT_TRUE(all_close(d_out.download(), std::vector<double>{ref2}, kF32Tol, "sum_of_squares accumulate"));
  }
}

// adamw_update with the grad norm folded in: the same update bit for bit, and *sumsq += Σ g² of the
// unscaled gradient, against the CPU sum and the separate pass (fp32 tolerance), added onto what
// was there, and the same bits on a repeat.
void check_adamw_norm(size_t n, size_t offset, bool scaled, uint64_t seed) {
  std::vector<float> p = random_f32_values(n + offset, seed), m = random_f32_values(n + offset, seed + 1, 0.1f);
  std::vector<float> v = random_f32_values(n + offset, seed + 2, 0.01f), g = random_f32_values(n + offset, seed + 3);
  for (float& x : v) x = std::fabs(x);
  const AdamWConfig c{1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f};
  const auto ni = static_cast<int64_t>(n);
  DeviceArray<float> d_p(p), d_m(m), d_v(v), d_g(g), d_scale(std::vector<float>{0.37f});
  DeviceArray<float> d_p2(p), d_m2(m), d_v2(v), d_sumsq(std::vector<float>{1.5f}), d_sep(1);
  DeviceArray<bf16> d_pb(n + offset), d_pb2(n + offset);
  DeviceArray<char> ws(grad_sumsq_workspace_bytes(ni)), sep_ws(reduce_workspace_bytes(ni));
  d_pb.poison(), d_pb2.poison();
  const float* scale = scaled ? d_scale.get() : nullptr;
  const DeviceArray<AdamWConstants> step2 = constants(c, 2), step3 = constants(c, 3);
  adamw_update(d_p.get() + offset, d_m.get() + offset, d_v.get() + offset, d_g.get() + offset, d_pb.get() + offset,
               ni, step2.get(), scale, nullptr);
  const GradSumOfSquares norm{d_sumsq.get(), ws.get()};
  adamw_update(d_p2.get() + offset, d_m2.get() + offset, d_v2.get() + offset, d_g.get() + offset,
               d_pb2.get() + offset, ni, step2.get(), scale, nullptr, &norm);
  sum_of_squares(d_sep.get(), d_g.get() + offset, ni, sep_ws.get(), nullptr);

  const std::string what = " n=" + std::to_string(n) + (offset ? " unaligned" : "") + (scaled ? " scaled" : "");
  EXPECT_TRUE(bitwise_equal(d_p.download(), d_p2.download())) << "params differ with the norm" << what;
  EXPECT_TRUE(bitwise_equal(d_m.download(), d_m2.download())) << "m differs with the norm" << what;
  EXPECT_TRUE(bitwise_equal(d_v.download(), d_v2.download())) << "v differs with the norm" << what;
  EXPECT_TRUE(bitwise_equal(d_pb.download(), d_pb2.download())) << "bf16 copy differs with the norm" << what;
  const double ref = pylon::cpu::sum_of_squares(g.data() + offset, ni);
  const std::vector<float> got = d_sumsq.download();
  EXPECT_TRUE(all_close(got, std::vector<double>{1.5 + ref}, kF32Tol, "adamw sumsq" + what));
  const std::vector<float> sep = d_sep.download();
  EXPECT_TRUE(all_close(std::vector<float>{got[0] - 1.5f}, sep, kF32Tol, "adamw sumsq vs sum_of_squares" + what));
  d_sumsq.upload({1.5f});
  adamw_update(d_p2.get() + offset, d_m2.get() + offset, d_v2.get() + offset, d_g.get() + offset, nullptr, ni,
               step3.get(), scale, nullptr, &norm);
  EXPECT_TRUE(bitwise_equal(got, d_sumsq.download())) << "the folded sum is not deterministic" << what;
}

TEST(CudaAdamW, FoldedGradNorm) {
  PYLON_SKIP_WITHOUT_CUDA();
  check_adamw_norm(7, 0, false, 21);
  check_adamw_norm(1000003, 0, true, 22);
  check_adamw_norm(1000003, 1, false, 23);  // scalar path
  check_adamw_norm(size_t{1} << 26, 0, false, 24);  // more than 1024 blocks' worth: grid-strided
}

TEST(CudaAdamW, ClipCoefficient) {
  PYLON_SKIP_WITHOUT_CUDA();
  struct Case {
    float sumsq, max_norm;
  };
  for (const Case& k : {Case{4.f, 1.f}, Case{0.25f, 1.f}, Case{4.f, 0.f}, Case{1e6f, 5.f}}) {
    DeviceArray<float> d_sumsq(std::vector<float>{k.sumsq}), d_coef(1);
    d_coef.poison();
    clip_coefficient(d_coef.get(), d_sumsq.get(), k.max_norm, nullptr);
    const double want = k.max_norm > 0 ? std::min(1.0, k.max_norm / (std::sqrt(double{k.sumsq}) + 1e-6)) : 1.0;
    EXPECT_TRUE(all_close(d_coef.download(), std::vector<double>{want}, kF32Tol, "clip_coefficient"));
  }
}

}  // namespace
}  // namespace pylon::cuda

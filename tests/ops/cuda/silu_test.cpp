// SiLU forward and backward against cpu::silu_forward/backward on the bf16-rounded inputs, and the
// fp32 overloads against the fp64 reference on fp32 inputs.
#include <gtest/gtest.h>

#include "ops/cpu/ops.h"
#include "ops/cuda/silu.h"
#include "support/cuda_test_util.h"

namespace pylon::cuda {
namespace {

using namespace pylon::cuda::testing;

// offset 1 leaves the buffers 2-byte aligned: the scalar path. in_place: din aliases dout.
void check_silu(size_t n, size_t offset, bool in_place, uint64_t seed) {
  const std::vector<float> x = random_bf16_values(n + offset, seed, 3.f), dy = random_bf16_values(n + offset, seed + 1);
  DeviceArray<bf16> d_x(to_bf16(x)), d_dy(to_bf16(dy)), d_y(n + offset), d_dx(n + offset);
  d_y.poison(), d_dx.poison();
  const auto ni = static_cast<int64_t>(n);
  silu_forward(d_y.get() + offset, d_x.get() + offset, ni, nullptr);
  bf16* din = in_place ? d_dy.get() : d_dx.get();
  silu_backward(din + offset, d_dy.get() + offset, d_x.get() + offset, ni, nullptr);

  std::vector<float> xs(x.begin() + static_cast<long>(offset), x.end()), dys(dy.begin() + static_cast<long>(offset), dy.end());
  std::vector<float> y(n), dx(n);
  cpu::silu_forward(y.data(), xs.data(), ni);
  cpu::silu_backward(dx.data(), dys.data(), xs.data(), ni);
  auto tail = [&](const std::vector<bf16>& v) {
    return to_float(std::vector<bf16>(v.begin() + static_cast<long>(offset), v.end()));
  };
  const std::string what = " n=" + std::to_string(n) + (offset ? " unaligned" : "") + (in_place ? " in place" : "");
  EXPECT_TRUE(all_close(tail(d_y.download()), y, kBf16Tol, "silu_forward" + what));
  EXPECT_TRUE(all_close(tail((in_place ? d_dy : d_dx).download()), dx, kBf16Tol, "silu_backward" + what));
}

// The fused recompute + backward: act = SiLU(x) and dx from one pass, checked against the CPU
// reference (bf16 tolerance) and bitwise against silu_forward + silu_backward. in_place: act
// overwrites x and dx overwrites dy, as the model's backward uses it.
void check_silu_recompute_backward(size_t n, size_t offset, bool in_place, uint64_t seed) {
  const std::vector<float> x = random_bf16_values(n + offset, seed, 3.f), dy = random_bf16_values(n + offset, seed + 1);
  const auto ni = static_cast<int64_t>(n);
  DeviceArray<bf16> d_x(to_bf16(x)), d_dy(to_bf16(dy)), d_y(n + offset), d_dx(n + offset);
  DeviceArray<bf16> d_y_sep(n + offset), d_dx_sep(n + offset);
  d_y.poison(), d_dx.poison(), d_y_sep.poison(), d_dx_sep.poison();
  silu_forward(d_y_sep.get() + offset, d_x.get() + offset, ni, nullptr);
  silu_backward(d_dx_sep.get() + offset, d_dy.get() + offset, d_x.get() + offset, ni, nullptr);
  bf16* act = in_place ? d_x.get() : d_y.get();
  bf16* din = in_place ? d_dy.get() : d_dx.get();
  silu_recompute_backward(act + offset, din + offset, d_dy.get() + offset, d_x.get() + offset, ni, nullptr);

  std::vector<float> xs(x.begin() + static_cast<long>(offset), x.end()), dys(dy.begin() + static_cast<long>(offset), dy.end());
  std::vector<float> y(n), dx(n);
  cpu::silu_forward(y.data(), xs.data(), ni);
  cpu::silu_backward(dx.data(), dys.data(), xs.data(), ni);
  auto tail = [&](const std::vector<bf16>& v) {
    return std::vector<bf16>(v.begin() + static_cast<long>(offset), v.end());
  };
  const std::string what = " n=" + std::to_string(n) + (offset ? " unaligned" : "") + (in_place ? " in place" : "");
  const std::vector<bf16> got_y = tail((in_place ? d_x : d_y).download());
  const std::vector<bf16> got_dx = tail((in_place ? d_dy : d_dx).download());
  EXPECT_TRUE(all_close(to_float(got_y), y, kBf16Tol, "silu_recompute_backward act" + what));
  EXPECT_TRUE(all_close(to_float(got_dx), dx, kBf16Tol, "silu_recompute_backward din" + what));
  EXPECT_TRUE(bitwise_equal(got_y, tail(d_y_sep.download()))) << "act differs from silu_forward" << what;
  EXPECT_TRUE(bitwise_equal(got_dx, tail(d_dx_sep.download()))) << "din differs from silu_backward" << what;
}

TEST(CudaSilu, OddSizes) {
  PYLON_SKIP_WITHOUT_CUDA();
  check_silu(7, 0, false, 1);
  check_silu(1000003, 0, false, 2);
  check_silu(1000003, 1, false, 3);
}

TEST(CudaSilu, BackwardInPlace) {
  PYLON_SKIP_WITHOUT_CUDA();
  check_silu(1000003, 0, true, 4);
}

TEST(CudaSilu, SeedPresetMlp) {
  PYLON_SKIP_WITHOUT_CUDA();
  check_silu(size_t{8192} * 8192, 0, false, 5);  // (N, 4D)
}

TEST(CudaSilu, RecomputeBackwardOddSizes) {
  PYLON_SKIP_WITHOUT_CUDA();
  check_silu_recompute_backward(7, 0, false, 11);
  check_silu_recompute_backward(1000003, 0, false, 12);
  check_silu_recompute_backward(1000003, 1, false, 13);  // scalar path
  check_silu_recompute_backward(1000003, 0, true, 14);
  check_silu_recompute_backward(1000003, 1, true, 15);
}

TEST(CudaSilu, RecomputeBackwardSeedPresetMlp) {
  PYLON_SKIP_WITHOUT_CUDA();
  check_silu_recompute_backward(size_t{8192} * 8192, 0, true, 16);  // (N, 4D), in place as the model does
}

// fp32: against the fp64 reference at torch's fp32 tolerance (expf and one division: a few ulps),
// the separate and the fused recompute paths, unaligned (scalar) too.
void check_silu_f32(size_t n, size_t offset, uint64_t seed) {
  const std::vector<float> x = random_f32_values(n + offset, seed, 3.f), dy = random_f32_values(n + offset, seed + 1);
  const auto ni = static_cast<int64_t>(n);
  DeviceArray<float> d_x(x), d_dy(dy), d_y(n + offset), d_dx(n + offset), d_act(n + offset), d_dx2(n + offset);
  d_y.poison(), d_dx.poison(), d_act.poison(), d_dx2.poison();
  silu_forward(d_y.get() + offset, d_x.get() + offset, ni, nullptr);
  silu_backward(d_dx.get() + offset, d_dy.get() + offset, d_x.get() + offset, ni, nullptr);
  silu_recompute_backward(d_act.get() + offset, d_dx2.get() + offset, d_dy.get() + offset, d_x.get() + offset, ni,
                          nullptr);
  std::vector<double> xs(x.begin() + static_cast<long>(offset), x.end()), dys(dy.begin() + static_cast<long>(offset), dy.end());
  std::vector<double> y(n), dx(n);
  cpu::silu_forward(y.data(), xs.data(), ni);
  cpu::silu_backward(dx.data(), dys.data(), xs.data(), ni);
  auto tail = [&](const std::vector<float>& v) { return std::vector<float>(v.begin() + static_cast<long>(offset), v.end()); };
  const std::string what = " fp32 n=" + std::to_string(n) + (offset ? " unaligned" : "");
  EXPECT_TRUE(all_close(tail(d_y.download()), y, kF32Tol, "silu_forward" + what));
  EXPECT_TRUE(all_close(tail(d_dx.download()), dx, kF32Tol, "silu_backward" + what));
  EXPECT_TRUE(all_close(tail(d_act.download()), y, kF32Tol, "silu_recompute_backward act" + what));
  EXPECT_TRUE(all_close(tail(d_dx2.download()), dx, kF32Tol, "silu_recompute_backward din" + what));
}

TEST(CudaSilu, Fp32OddSizes) {
  PYLON_SKIP_WITHOUT_CUDA();
  check_silu_f32(7, 0, 21);
  check_silu_f32(1000003, 0, 22);
  check_silu_f32(1000003, 1, 23);  // scalar path
}

}  // namespace
}  // namespace pylon::cuda

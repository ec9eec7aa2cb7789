// SiLU forward and backward against cpu::silu_forward/backward on the bf16-rounded inputs.
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

}  // namespace
}  // namespace pylon::cuda

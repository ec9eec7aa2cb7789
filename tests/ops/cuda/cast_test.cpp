// The fp32 <-> bf16 casts against the host's round-to-nearest-even conversion, bit for bit.
#include <gtest/gtest.h>

#include "ops/cuda/cast.h"
#include "support/cuda_test_util.h"

namespace pylon::cuda {
namespace {

using namespace pylon::cuda::testing;
constexpr Tolerance kExact{0, 0};

// offset 1 makes the buffers 4- or 2-byte aligned only: the scalar path.
void check_casts(size_t n, size_t offset, uint64_t seed) {
  std::vector<float> x = random_f32_values(n + offset, seed, 3.f);
  DeviceArray<float> f32(x);
  DeviceArray<bf16> b16(n + offset);
  b16.poison();
  cast_f32_to_bf16(b16.get() + offset, f32.get() + offset, static_cast<int64_t>(n), nullptr);
  std::vector<bf16> got = b16.download();
  std::vector<float> want(n);
  for (size_t i = 0; i < n; ++i) want[i] = round_bf16(x[offset + i]);
  std::vector<float> got_vals(n);
  for (size_t i = 0; i < n; ++i) got_vals[i] = __bfloat162float(got[offset + i]);
  EXPECT_TRUE(all_close(got_vals, want, kExact, "f32->bf16 n=" + std::to_string(n)));

  f32.poison();
  cast_bf16_to_f32(f32.get() + offset, b16.get() + offset, static_cast<int64_t>(n), nullptr);
  std::vector<float> back = f32.download();
  EXPECT_TRUE(all_close(std::vector<float>(back.begin() + static_cast<long>(offset), back.end()), want, kExact,
                        "bf16->f32 n=" + std::to_string(n)));
}

TEST(CudaCast, RoundTripIsRoundToNearestEven) {
  PYLON_SKIP_WITHOUT_CUDA();
  check_casts(7, 0, 1);
  check_casts(1000003, 0, 2);
  check_casts(8192 * 2048, 0, 3);
}

TEST(CudaCast, UnalignedBuffersUseTheScalarPath) {
  PYLON_SKIP_WITHOUT_CUDA();
  check_casts(1000003, 1, 4);
}

}  // namespace
}  // namespace pylon::cuda

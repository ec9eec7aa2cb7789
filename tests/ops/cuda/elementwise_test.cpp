// The last residual add (bf16 and fp32 overloads) against the host sum, element by element: the
// kernel adds in fp32 and rounds once to the output type, as the host does here, so exactly.
#include <gtest/gtest.h>

#include "ops/cuda/elementwise.h"
#include "support/cuda_test_util.h"

namespace pylon::cuda {
namespace {

using namespace pylon::cuda::testing;

TEST(CudaResidualAdd, Bf16AndFp32OddSizes) {
  PYLON_SKIP_WITHOUT_CUDA();
  for (size_t n : {size_t{7}, size_t{1000003}}) {  // a tail of 7 and of 3 past the 8-wide part
    const std::vector<float> a = random_bf16_values(n, 1), b = random_bf16_values(n, 2);
    const std::vector<float> af = random_f32_values(n, 3), bf = random_f32_values(n, 4);
    DeviceArray<bf16> d_a(to_bf16(a)), d_b(to_bf16(b)), d_out(n);
    DeviceArray<float> d_af(af), d_bf(bf), d_outf(n);
    d_out.poison(), d_outf.poison();
    residual_add(d_out.get(), d_a.get(), d_b.get(), static_cast<int64_t>(n), nullptr);
    residual_add(d_outf.get(), d_af.get(), d_bf.get(), static_cast<int64_t>(n), nullptr);
    std::vector<float> ref(n), reff(n);
    for (size_t i = 0; i < n; ++i) ref[i] = round_bf16(a[i] + b[i]), reff[i] = af[i] + bf[i];
    const std::string what = " n=" + std::to_string(n);
    EXPECT_TRUE(all_close(to_float(d_out.download()), ref, Tolerance{0, 0}, "residual_add bf16" + what));
    EXPECT_TRUE(all_close(d_outf.download(), reff, Tolerance{0, 0}, "residual_add fp32" + what));
  }
  // In place (out aliases a), as the model never does but the contract allows.
  const std::vector<float> a = random_f32_values(1001, 5), b = random_f32_values(1001, 6);
  DeviceArray<float> d_a(a), d_b(b);
  residual_add(d_a.get(), d_a.get(), d_b.get(), 1001, nullptr);
  std::vector<float> ref(1001);
  for (size_t i = 0; i < ref.size(); ++i) ref[i] = a[i] + b[i];
  EXPECT_TRUE(all_close(d_a.download(), ref, Tolerance{0, 0}, "residual_add fp32 in place"));
}

}  // namespace
}  // namespace pylon::cuda

// Deterministic column sums (the bias gradient) against fp64 sums of the same values.
#include <gtest/gtest.h>

#include <array>

#include "ops/cuda/column_sum.h"
#include "support/cuda_test_util.h"

namespace pylon::cuda {
namespace {

using namespace pylon::cuda::testing;
// fp32 sums of up to 1e5 terms in another order than the reference: ~10x the fp32 default.
constexpr Tolerance kF32SumTol{1e-5, 1e-4};

std::vector<double> column_sums(const std::vector<float>& in, const std::vector<float>& init, int64_t R, int C) {
  std::vector<double> out(init.begin(), init.end());
  for (int64_t r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) out[c] += in[static_cast<size_t>(r) * C + c];
  return out;
}

void check_bias_backward(int N, int O, uint64_t seed) {
  const std::vector<float> dout = random_bf16_values(static_cast<size_t>(N) * O, seed);
  const std::vector<float> db0 = random_f32_values(O, seed + 1);
  DeviceArray<bf16> d_dout(to_bf16(dout));
  DeviceArray<float> d_db(db0);
  DeviceArray<char> ws(bias_backward_workspace_bytes(N, O));
  bias_backward(d_db.get(), d_dout.get(), N, O, ws.get(), nullptr);
  const std::vector<float> got = d_db.download();
  EXPECT_TRUE(all_close(got, column_sums(dout, db0, N, O), kF32SumTol,
                        "bias_backward N=" + std::to_string(N) + " O=" + std::to_string(O)));
  d_db.upload(db0);
  bias_backward(d_db.get(), d_dout.get(), N, O, ws.get(), nullptr);
  EXPECT_TRUE(bitwise_equal(got, d_db.download())) << "bias_backward is not deterministic";
}

TEST(CudaColumnSum, BiasBackwardOddSizes) {
  PYLON_SKIP_WITHOUT_CUDA();
  check_bias_backward(7, 2051, 1);
  check_bias_backward(33, 5, 2);
  check_bias_backward(100003, 3, 3);  // three levels
}

TEST(CudaColumnSum, BiasBackwardSeedPreset) {
  PYLON_SKIP_WITHOUT_CUDA();
  check_bias_backward(8192, 6144, 4);  // in_proj
  check_bias_backward(8192, 2048, 5);  // out_proj
}

TEST(CudaColumnSum, Float32Input) {
  PYLON_SKIP_WITHOUT_CUDA();
  const int64_t R = 1031;
  const int C = 77;
  const std::vector<float> in = random_f32_values(static_cast<size_t>(R) * C, 6), init = random_f32_values(C, 7);
  DeviceArray<float> d_in(in), d_out(init);
  DeviceArray<char> ws(column_sum_workspace_bytes(R, C));
  column_sum_accumulate(d_out.get(), d_in.get(), R, C, ws.get(), nullptr);
  EXPECT_TRUE(all_close(d_out.download(), column_sums(in, init, R, C), kF32SumTol, "column_sum fp32"));
}

// The fp32 overload of bias_backward (the --dtype fp32 model's bias gradients).
TEST(CudaColumnSum, BiasBackwardFp32OddSizes) {
  PYLON_SKIP_WITHOUT_CUDA();
  for (auto [N, O] : {std::array{7, 2051}, std::array{1000, 45}, std::array{4099, 384}}) {
    const std::vector<float> dout = random_f32_values(static_cast<size_t>(N) * O, 40), db0 = random_f32_values(O, 41);
    DeviceArray<float> d_dout(dout), d_db(db0);
    DeviceArray<char> ws(bias_backward_workspace_bytes(N, O));
    bias_backward(d_db.get(), d_dout.get(), N, O, ws.get(), nullptr);
    EXPECT_TRUE(all_close(d_db.download(), column_sums(dout, db0, N, O), kF32SumTol,
                          "bias_backward fp32 N=" + std::to_string(N) + " O=" + std::to_string(O)));
  }
}

}  // namespace
}  // namespace pylon::cuda

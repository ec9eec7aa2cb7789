// CUDA rows: deterministic column sums (the bias gradient) against fp64 sums of the same values.
#include "ops/cuda/column_sum.h"
#include "ops/cuda/cuda_op_cases.h"

namespace pylon::cuda::testing {
namespace {

// fp32 sums of up to 1e5 terms in another order than the reference: ~10x the fp32 default.
constexpr Tolerance kF32SumTol{.rtol = 1e-5, .atol = 1e-4};

std::vector<double> column_sums(const std::vector<float>& in, const std::vector<float>& init, int64_t R, int C) {
  std::vector<double> out(init.begin(), init.end());
  for (int64_t r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) out[c] += in[static_cast<size_t>(r) * C + c];
  return out;
}

}  // namespace

// bf16 dout (the bf16 model) is also checked for the same bits on a second run.
OpCase bias_backward(DType d, int N, int O, uint64_t seed) {
  return cuda_case("bias_backward", d, shape_of({{"N", N}, {"O", O}}), "", [=](const OpRun& run) {
    const size_t n = static_cast<size_t>(N) * O;
    const std::vector<float> db0 = random_f32_values(O, seed + 1);
    DeviceArray<float> d_db(db0);
    DeviceArray<char> ws(bias_backward_workspace_bytes(N, O));
    if (d == DType::bf16) {
      const std::vector<float> dout = random_bf16_values(n, seed);
      DeviceArray<bf16> d_dout(to_bf16(dout));
      cuda::bias_backward(d_db.get(), d_dout.get(), N, O, ws.get(), nullptr);
      const std::vector<float> got = d_db.download();
      run.expect_close("db", got, column_sums(dout, db0, N, O), DType::f32, kF32SumTol);
      d_db.upload(db0);
      cuda::bias_backward(d_db.get(), d_dout.get(), N, O, ws.get(), nullptr);
      run.expect_bitwise("db, second run", d_db.download(), got);
    } else {
      const std::vector<float> dout = random_f32_values(n, seed);
      DeviceArray<float> d_dout(dout);
      cuda::bias_backward(d_db.get(), d_dout.get(), N, O, ws.get(), nullptr);
      run.expect_close("db", d_db.download(), column_sums(dout, db0, N, O), DType::f32, kF32SumTol);
    }
  });
}

OpCase column_sum_accumulate(int64_t R, int C, uint64_t seed) {
  return cuda_case("column_sum_accumulate", DType::f32, shape_of({{"R", R}, {"C", C}}), "", [=](const OpRun& run) {
    const std::vector<float> in = random_f32_values(static_cast<size_t>(R) * C, seed);
    const std::vector<float> init = random_f32_values(C, seed + 1);
    DeviceArray<float> d_in(in), d_out(init);
    DeviceArray<char> ws(column_sum_workspace_bytes(R, C));
    cuda::column_sum_accumulate(d_out.get(), d_in.get(), R, C, ws.get(), nullptr);
    run.expect_close("out", d_out.download(), column_sums(in, init, R, C), DType::f32, kF32SumTol);
  });
}

}  // namespace pylon::cuda::testing

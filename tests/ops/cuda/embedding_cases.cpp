// CUDA rows: the embedding gather and its deterministic scatter-add against
// cpu::embedding_forward/backward.
#include "ops/cpu/ops.h"
#include "ops/cuda/cuda_op_cases.h"
#include "ops/cuda/embedding.h"

namespace pylon::cuda::testing {
namespace {

// fp32 sums of up to N rows in another order than the reference's: rounding grows like
// sqrt(terms)·eps·|partial sum|, so ~10x the fp32 default (an indexing error is O(1)).
constexpr Tolerance kF32SumTol{.rtol = 1e-5, .atol = 1e-4};

std::string embedding_shape(int N, int D, int V) { return shape_of({{"N", N}, {"D", D}, {"V", V}}); }

}  // namespace

// The gather is exact. Seeds: table `seed`, ids `seed`.
OpCase embedding_forward(DType d, int N, int D, int V, uint64_t seed) {
  return cuda_case("embedding_forward", d, embedding_shape(N, D, V), "", [=](const OpRun& run) {
    const size_t n_table = static_cast<size_t>(V) * D, n_out = static_cast<size_t>(N) * D;
    const std::vector<float> table = d == DType::bf16 ? random_bf16_values(n_table, seed) : random_f32_values(n_table, seed);
    const std::vector<int32_t> ids = random_ids(N, V, seed);
    DeviceArray<int32_t> d_ids(ids);
    std::vector<float> ref(n_out);
    cpu::embedding_forward(ref.data(), ids.data(), table.data(), N, D);
    if (d == DType::bf16) {
      DeviceArray<bf16> d_table(to_bf16(table)), d_out(n_out);
      d_out.poison();
      cuda::embedding_forward(d_out.get(), d_ids.get(), d_table.get(), N, D, nullptr);
      run.expect_close("out", to_float(d_out.download()), ref, DType::bf16, kExact);
    } else {
      DeviceArray<float> d_table(table), d_out(n_out);
      d_out.poison();
      cuda::embedding_forward(d_out.get(), d_ids.get(), d_table.get(), N, D, nullptr);
      run.expect_close("out", d_out.download(), ref, DType::f32, kExact);
    }
  });
}

// Seeds: bf16: dout `seed`, dtable `seed` + 1, ids `seed`; fp32 (as the fp32 rows were made with
// their forward): dout `seed` + 1, dtable `seed` + 2. bf16 rows are also checked for the same bits
// on a second run.
OpCase embedding_backward(DType d, int N, int D, int V, uint64_t seed, int hot_id) {
  const std::string variant = hot_id >= 0 ? "id " + std::to_string(hot_id) + " at every other position" : "";
  return cuda_case("embedding_backward", d, embedding_shape(N, D, V), variant, [=](const OpRun& run) {
    const size_t n_table = static_cast<size_t>(V) * D, n_out = static_cast<size_t>(N) * D;
    const bool b16 = d == DType::bf16;
    const std::vector<float> dout = b16 ? random_bf16_values(n_out, seed) : random_f32_values(n_out, seed + 1);
    const std::vector<float> dtable0 = random_f32_values(n_table, b16 ? seed + 1 : seed + 2);
    std::vector<int32_t> ids = random_ids(N, V, seed);
    if (hot_id >= 0)
      for (size_t i = 0; i < ids.size(); i += 2) ids[i] = hot_id;
    DeviceArray<float> d_dtable(dtable0);
    DeviceArray<int32_t> d_ids(ids);
    DeviceArray<char> ws(embedding_backward_workspace_bytes(N, D, V));
    std::vector<double> ref(dtable0.begin(), dtable0.end());
    const std::vector<double> dout_d(dout.begin(), dout.end());
    cpu::embedding_backward(ref.data(), dout_d.data(), ids.data(), N, D);
    if (b16) {
      DeviceArray<bf16> d_dout(to_bf16(dout));
      cuda::embedding_backward(d_dtable.get(), d_dout.get(), d_ids.get(), N, D, V, ws.get(), nullptr);
      const std::vector<float> got = d_dtable.download();
      run.expect_close("dtable", got, ref, DType::f32, kF32SumTol);
      d_dtable.upload(dtable0);
      cuda::embedding_backward(d_dtable.get(), d_dout.get(), d_ids.get(), N, D, V, ws.get(), nullptr);
      run.expect_bitwise("dtable, second run", d_dtable.download(), got);
    } else {
      DeviceArray<float> d_dout(dout);
      cuda::embedding_backward(d_dtable.get(), d_dout.get(), d_ids.get(), N, D, V, ws.get(), nullptr);
      run.expect_close("dtable", d_dtable.download(), ref, DType::f32, kF32SumTol);
    }
  });
}

}  // namespace pylon::cuda::testing

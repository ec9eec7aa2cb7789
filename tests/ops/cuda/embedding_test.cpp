// Embedding gather and deterministic scatter-add against cpu::embedding_forward/backward.
#include <gtest/gtest.h>

#include "ops/cpu/ops.h"
#include "ops/cuda/embedding.h"
#include "support/cuda_test_util.h"

namespace pylon::cuda {
namespace {

using namespace pylon::cuda::testing;
// fp32 sums of up to N bf16 rows in another order than the reference's: rounding grows like
// sqrt(terms)·eps·|partial sum|, so ~10x the fp32 default (an indexing error is O(1)).
constexpr Tolerance kF32SumTol{1e-5, 1e-4};

void check_forward(int N, int D, int V, uint64_t seed) {
  const std::vector<float> table = random_bf16_values(static_cast<size_t>(V) * D, seed);
  const std::vector<int32_t> ids = random_ids(N, V, seed);
  DeviceArray<bf16> d_table(to_bf16(table)), d_out(static_cast<size_t>(N) * D);
  DeviceArray<int32_t> d_ids(ids);
  d_out.poison();
  embedding_forward(d_out.get(), d_ids.get(), d_table.get(), N, D, nullptr);
  std::vector<float> ref(static_cast<size_t>(N) * D);
  cpu::embedding_forward(ref.data(), ids.data(), table.data(), N, D);
  EXPECT_TRUE(all_close(to_float(d_out.download()), ref, Tolerance{0, 0},
                        "embedding_forward N=" + std::to_string(N) + " D=" + std::to_string(D)));
}

void check_backward(int N, int D, int V, uint64_t seed, std::vector<int32_t> ids = {}) {
  const std::vector<float> dout = random_bf16_values(static_cast<size_t>(N) * D, seed);
  const std::vector<float> dtable0 = random_f32_values(static_cast<size_t>(V) * D, seed + 1);
  if (ids.empty()) ids = random_ids(N, V, seed);
  DeviceArray<bf16> d_dout(to_bf16(dout));
  DeviceArray<float> d_dtable(dtable0);
  DeviceArray<int32_t> d_ids(ids);
  DeviceArray<char> ws(embedding_backward_workspace_bytes(N, D, V));
  embedding_backward(d_dtable.get(), d_dout.get(), d_ids.get(), N, D, V, ws.get(), nullptr);
  const std::vector<float> got = d_dtable.download();

  std::vector<double> ref(dtable0.begin(), dtable0.end());
  const std::vector<double> dout_d(dout.begin(), dout.end());
  cpu::embedding_backward(ref.data(), dout_d.data(), ids.data(), N, D);
  EXPECT_TRUE(all_close(got, ref, kF32SumTol,
                        "embedding_backward N=" + std::to_string(N) + " D=" + std::to_string(D) +
                            " V=" + std::to_string(V)));

  // Bitwise reproducible: the same inputs give the same bits.
  d_dtable.upload(dtable0);
  embedding_backward(d_dtable.get(), d_dout.get(), d_ids.get(), N, D, V, ws.get(), nullptr);
  EXPECT_TRUE(bitwise_equal(got, d_dtable.download())) << "embedding_backward is not deterministic";
}

TEST(CudaEmbedding, ForwardOddSizes) {
  PYLON_SKIP_WITHOUT_CUDA();
  check_forward(7, 2051, 13, 1);
}

TEST(CudaEmbedding, ForwardSeedPreset) {
  PYLON_SKIP_WITHOUT_CUDA();
  check_forward(8192, 2048, 32000, 2);
}

TEST(CudaEmbedding, BackwardOddSizes) {
  PYLON_SKIP_WITHOUT_CUDA();
  check_backward(7, 2051, 13, 3);
  check_backward(1000, 77, 3, 4);  // runs of ~333 rows, scalar path
}

TEST(CudaEmbedding, BackwardSeedPreset) {
  PYLON_SKIP_WITHOUT_CUDA();
  check_backward(8192, 2048, 32000, 5);
}

TEST(CudaEmbedding, BackwardLongRuns) {
  PYLON_SKIP_WITHOUT_CUDA();
  check_backward(8192, 2048, 37, 6);  // ~220 rows per id: runs across 16-row segments
  check_backward(17, 8, 2, 7);        // runs ending on and crossing the segment boundary
  std::vector<int32_t> ids = random_ids(8192, 32000, 8);
  for (size_t i = 0; i < ids.size(); i += 2) ids[i] = 17;  // one id at half of the positions
  check_backward(8192, 2048, 32000, 9, ids);
}

// fp32 table and dout (the --dtype fp32 model): the gather is exact, the scatter-add has the sums'
// tolerance above; odd sizes (scalar path) and D % 8 == 0 (8-wide path).
void check_f32(int N, int D, int V, uint64_t seed) {
  const std::string what = " fp32 N=" + std::to_string(N) + " D=" + std::to_string(D) + " V=" + std::to_string(V);
  const std::vector<float> table = random_f32_values(static_cast<size_t>(V) * D, seed);
  const std::vector<float> dout = random_f32_values(static_cast<size_t>(N) * D, seed + 1);
  const std::vector<float> dtable0 = random_f32_values(static_cast<size_t>(V) * D, seed + 2);
  const std::vector<int32_t> ids = random_ids(N, V, seed);
  DeviceArray<float> d_table(table), d_out(static_cast<size_t>(N) * D), d_dout(dout), d_dtable(dtable0);
  DeviceArray<int32_t> d_ids(ids);
  DeviceArray<char> ws(embedding_backward_workspace_bytes(N, D, V));
  d_out.poison();
  embedding_forward(d_out.get(), d_ids.get(), d_table.get(), N, D, nullptr);
  embedding_backward(d_dtable.get(), d_dout.get(), d_ids.get(), N, D, V, ws.get(), nullptr);
  std::vector<double> out(static_cast<size_t>(N) * D), dtable(dtable0.begin(), dtable0.end());
  const std::vector<double> table_d(table.begin(), table.end()), dout_d(dout.begin(), dout.end());
  cpu::embedding_forward(out.data(), ids.data(), table_d.data(), N, D);
  cpu::embedding_backward(dtable.data(), dout_d.data(), ids.data(), N, D);
  EXPECT_TRUE(all_close(d_out.download(), out, Tolerance{0, 0}, "embedding_forward" + what));
  EXPECT_TRUE(all_close(d_dtable.download(), dtable, kF32SumTol, "embedding_backward" + what));
}

TEST(CudaEmbedding, Fp32OddSizes) {
  PYLON_SKIP_WITHOUT_CUDA();
  check_f32(7, 2051, 13, 21);
  check_f32(1000, 77, 3, 22);   // long runs, scalar path
  check_f32(999, 136, 37, 23);  // 8-wide path, runs across segments
}

}  // namespace
}  // namespace pylon::cuda

// Fused cross-entropy forward+backward and the mean loss against cpu::cross_entropy_forward/backward
// in fp64 on the bf16-rounded logits.
#include <gtest/gtest.h>

#include <numeric>

#include "ops/cpu/ops.h"
#include "ops/cuda/cross_entropy.h"
#include "support/cuda_test_util.h"

namespace pylon::cuda {
namespace {

using namespace pylon::cuda::testing;
// The gradients are scale·p with p ~ 1/V: torch's atol 1e-5 would accept any value there, so the
// check is relative (bf16 rounding is relative at every magnitude).
constexpr Tolerance kGradTol{1.6e-2, 1e-10};

void check_cross_entropy(int N, int V, float scale, uint64_t seed) {
  const size_t n = static_cast<size_t>(N) * V;
  const std::vector<float> logits = random_bf16_values(n, seed, 2.f);
  const std::vector<int32_t> targets = random_ids(N, V, seed);
  DeviceArray<bf16> d_logits(to_bf16(logits));
  DeviceArray<float> d_losses(N);
  DeviceArray<int32_t> d_targets(targets);
  d_losses.poison();
  cross_entropy_forward_backward(d_losses.get(), d_logits.get(), d_targets.get(), N, V, scale, nullptr);
  const std::vector<float> losses = d_losses.download();

  std::vector<double> ref(logits.begin(), logits.end()), ref_losses(N);
  cpu::cross_entropy_forward(ref_losses.data(), ref.data(), ref.data(), targets.data(), N, V);
  cpu::cross_entropy_backward(ref.data(), ref.data(), targets.data(), N, V, static_cast<double>(scale));
  const std::string what = " N=" + std::to_string(N) + " V=" + std::to_string(V);
  EXPECT_TRUE(all_close(losses, ref_losses, kF32Tol, "losses" + what));
  EXPECT_TRUE(all_close(to_float(d_logits.download()), ref, kGradTol, "dlogits" + what));

  d_logits.upload(to_bf16(logits));
  cross_entropy_forward_backward(d_losses.get(), d_logits.get(), d_targets.get(), N, V, scale, nullptr);
  EXPECT_TRUE(bitwise_equal(losses, d_losses.download())) << "cross-entropy losses are not deterministic";
}

TEST(CudaCrossEntropy, SmallAndOddVocab) {
  PYLON_SKIP_WITHOUT_CUDA();
  check_cross_entropy(5, 40, 1.f, 1);
  check_cross_entropy(7, 32003, 1.f, 2);  // scalar path, part of the row re-read
  check_cross_entropy(3, 50304, 0.5f, 3);  // 16-byte path, part of the row re-read
}

TEST(CudaCrossEntropy, SeedPreset) {
  PYLON_SKIP_WITHOUT_CUDA();
  check_cross_entropy(8192, 32000, 1.f / 8192, 4);
}

TEST(CudaCrossEntropy, LossMean) {
  PYLON_SKIP_WITHOUT_CUDA();
  for (int N : {7, 8192, 100003}) {
    std::vector<float> losses = random_f32_values(N, 5);
    for (float& l : losses) l = std::fabs(l) * 10.f;
    DeviceArray<float> d_losses(losses), d_mean(1);
    DeviceArray<char> ws(loss_mean_workspace_bytes(N));
    d_mean.poison();
    loss_mean(d_mean.get(), d_losses.get(), N, ws.get(), nullptr);
    const double ref = std::accumulate(losses.begin(), losses.end(), 0.0) / N;
    EXPECT_TRUE(all_close(d_mean.download(), std::vector<double>{ref}, kF32Tol, "loss_mean N=" + std::to_string(N)));
  }
}

// fp32 logits (the --dtype fp32 model) against the fp64 reference: losses as above; the gradient
// relative at 3e-5 (exp2 of an fp32 argument of up to ~30, one rounding of it: 1.3e-6; exp2f's 2
// ulps and the fp32 row sum: ~3e-6 at worst; a bf16 rounding would be 2e-3 and fail).
constexpr Tolerance kGradF32Tol{3e-5, 1e-10};

void check_cross_entropy_f32(int N, int V, float scale, uint64_t seed) {
  const size_t n = static_cast<size_t>(N) * V;
  const std::vector<float> logits = random_f32_values(n, seed, 2.f);
  const std::vector<int32_t> targets = random_ids(N, V, seed);
  DeviceArray<float> d_logits(logits), d_losses(N);
  DeviceArray<int32_t> d_targets(targets);
  d_losses.poison();
  cross_entropy_forward_backward(d_losses.get(), d_logits.get(), d_targets.get(), N, V, scale, nullptr);
  std::vector<double> ref(logits.begin(), logits.end()), ref_losses(N);
  cpu::cross_entropy_forward(ref_losses.data(), ref.data(), ref.data(), targets.data(), N, V);
  cpu::cross_entropy_backward(ref.data(), ref.data(), targets.data(), N, V, static_cast<double>(scale));
  const std::string what = " fp32 N=" + std::to_string(N) + " V=" + std::to_string(V);
  EXPECT_TRUE(all_close(d_losses.download(), ref_losses, kF32Tol, "losses" + what));
  EXPECT_TRUE(all_close(d_logits.download(), ref, kGradF32Tol, "dlogits" + what));
}

TEST(CudaCrossEntropy, Fp32OddVocab) {
  PYLON_SKIP_WITHOUT_CUDA();
  check_cross_entropy_f32(5, 40, 1.f, 11);
  check_cross_entropy_f32(7, 32003, 1.f, 12);      // scalar path, the row in shared memory
  check_cross_entropy_f32(3, 60000, 0.5f, 13);     // 8-wide path, too long for shared memory in fp32
  check_cross_entropy_f32(64, 32000, 1.f / 64, 14);
}

}  // namespace
}  // namespace pylon::cuda

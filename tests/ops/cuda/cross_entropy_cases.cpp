// CUDA rows: fused cross-entropy forward+backward and the mean loss against
// cpu::cross_entropy_forward/backward in fp64 on the same logits.
#include <numeric>

#include "ops/cpu/ops.h"
#include "ops/cuda/cross_entropy.h"
#include "ops/cuda/cuda_op_cases.h"

namespace pylon::cuda::testing {
namespace {

// bf16 logits: the gradients are scale·p with p ~ 1/V, where torch's atol 1e-5 would accept any
// value, so the check is relative (bf16 rounding is relative at every magnitude).
constexpr Tolerance kGradTol{.rtol = 1.6e-2, .atol = 1e-10};
// fp32 logits: the gradient relative at 3e-5 (exp2 of an fp32 argument of up to ~30, one rounding
// of it: 1.3e-6; exp2f's 2 ulps and the fp32 row sum: ~3e-6 at worst; a bf16 rounding would be 2e-3
// and fail).
constexpr Tolerance kGradF32Tol{.rtol = 3e-5, .atol = 1e-10};

}  // namespace

// bf16: the losses are also checked for the same bits on a second run.
OpCase cross_entropy_forward_backward(DType d, int N, int V, float scale, uint64_t seed) {
  const std::string shape = shape_of({{"N", N}, {"V", V}}) + " scale=" + format_number(scale);
  return cuda_case("cross_entropy_forward_backward", d, shape, "", [=](const OpRun& run) {
    const size_t n = static_cast<size_t>(N) * V;
    const std::vector<float> logits = d == DType::bf16 ? random_bf16_values(n, seed, 2.f) : random_f32_values(n, seed, 2.f);
    const std::vector<int32_t> targets = random_ids(N, V, seed);
    DeviceArray<float> d_losses(N);
    DeviceArray<int32_t> d_targets(targets);
    d_losses.poison();
    std::vector<double> ref(logits.begin(), logits.end()), ref_losses(N);
    cpu::cross_entropy_forward(ref_losses.data(), ref.data(), ref.data(), targets.data(), N, V);
    cpu::cross_entropy_backward(ref.data(), ref.data(), targets.data(), N, V, static_cast<double>(scale));
    if (d == DType::bf16) {
      DeviceArray<bf16> d_logits(to_bf16(logits));
      cuda::cross_entropy_forward_backward(d_losses.get(), d_logits.get(), d_targets.get(), N, V, scale, nullptr);
      const std::vector<float> losses = d_losses.download();
      run.expect_close("losses", losses, ref_losses, DType::f32);
      run.expect_close("dlogits", to_float(d_logits.download()), ref, DType::bf16, kGradTol);
      d_logits.upload(to_bf16(logits));
      cuda::cross_entropy_forward_backward(d_losses.get(), d_logits.get(), d_targets.get(), N, V, scale, nullptr);
      run.expect_bitwise("losses, second run", d_losses.download(), losses);
    } else {
      DeviceArray<float> d_logits(logits);
      cuda::cross_entropy_forward_backward(d_losses.get(), d_logits.get(), d_targets.get(), N, V, scale, nullptr);
      run.expect_close("losses", d_losses.download(), ref_losses, DType::f32);
      run.expect_close("dlogits", d_logits.download(), ref, DType::f32, kGradF32Tol);
    }
  });
}

OpCase loss_mean(int N, uint64_t seed) {
  return cuda_case("loss_mean", DType::f32, shape_of({{"N", N}}), "", [=](const OpRun& run) {
    std::vector<float> losses = random_f32_values(N, seed);
    for (float& l : losses) l = std::fabs(l) * 10.f;
    DeviceArray<float> d_losses(losses), d_mean(1);
    DeviceArray<char> ws(loss_mean_workspace_bytes(N));
    d_mean.poison();
    cuda::loss_mean(d_mean.get(), d_losses.get(), N, ws.get(), nullptr);
    const double ref = std::accumulate(losses.begin(), losses.end(), 0.0) / N;
    run.expect_close("mean", d_mean.download(), std::vector<double>{ref}, DType::f32);
  });
}

}  // namespace pylon::cuda::testing

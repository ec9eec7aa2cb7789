// RoPE forward and backward in place against cpu::rope_forward/backward (float) on the same qkv.
#include <gtest/gtest.h>

#include "ops/cpu/ops.h"
#include "ops/cuda/rope.h"
#include "support/cuda_test_util.h"

namespace pylon::cuda {
namespace {

using namespace pylon::cuda::testing;
// Angles p·θ^(−2i/hd) reach ~1000 rad in fp32, where one ulp is 6e-5 rad; the GPU's and the CPU's
// θ^(−2i/hd), sin and cos may differ by an ulp, which moves an output by up to |x|·1.2e-4 ≈ 7e-4
// for |x| ≤ 5.5. The bf16 rtol stays; atol covers outputs that cancel to near zero.
constexpr Tolerance kRopeTol{1.6e-2, 1e-3};

void check_rope(int B, int T, int D, int H, float theta, int pos0, uint64_t seed) {
  const size_t n = static_cast<size_t>(B) * T * 3 * D;
  const std::vector<float> qkv = random_bf16_values(n, seed);
  const std::string what = " B=" + std::to_string(B) + " T=" + std::to_string(T) + " D=" + std::to_string(D) +
                           " H=" + std::to_string(H) + " pos0=" + std::to_string(pos0);
  for (bool forward : {true, false}) {
    DeviceArray<bf16> d_qkv(to_bf16(qkv));
    std::vector<float> ref = qkv;
    if (forward) {
      rope_forward(d_qkv.get(), B, T, D, H, theta, pos0, nullptr);
      cpu::rope_forward(ref.data(), B, T, D, H, theta, pos0);
    } else {
      rope_backward(d_qkv.get(), B, T, D, H, theta, pos0, nullptr);
      cpu::rope_backward(ref.data(), B, T, D, H, theta, pos0);
    }
    EXPECT_TRUE(all_close(to_float(d_qkv.download()), ref, kRopeTol, (forward ? "rope_forward" : "rope_backward") + what));
  }
}

TEST(CudaRope, OddHeadSize) {
  PYLON_SKIP_WITHOUT_CUDA();
  check_rope(2, 7, 36, 3, 10000.f, 5, 1);  // hd = 12: the scalar path
  check_rope(1, 3, 256, 2, 500000.f, 1000, 2);
}

TEST(CudaRope, SeedPresetSizes) {
  PYLON_SKIP_WITHOUT_CUDA();
  check_rope(8, 1024, 2048, 16, 10000.f, 0, 3);
}

TEST(CudaRope, BackwardInvertsForward) {
  PYLON_SKIP_WITHOUT_CUDA();
  const int B = 2, T = 64, D = 256, H = 4;
  const std::vector<float> qkv = random_bf16_values(static_cast<size_t>(B) * T * 3 * D, 4);
  DeviceArray<bf16> d_qkv(to_bf16(qkv));
  rope_forward(d_qkv.get(), B, T, D, H, 10000.f, 3, nullptr);
  rope_backward(d_qkv.get(), B, T, D, H, 10000.f, 3, nullptr);
  // Two bf16 roundings of rotated pairs: each moves an element by up to 2^-9 of its pair's norm
  // (|pair| < 8 here), so ~3e-2 absolute at worst.
  EXPECT_TRUE(all_close(to_float(d_qkv.download()), qkv, Tolerance{1e-2, 4e-2}, "rope backward(forward(x))"));
}

// fp32 qkv against the fp64 reference. Positions stay below 12, so angles are under 12 rad: the
// fp32 θ^(−2i/hd) and p·θ^(−2i/hd) (two roundings, ≤ 1.3e-6 rad) and sincosf (1 ulp) move an output
// by ≤ 6e-6 for the pair norms here (≤ 4.5): atol 2e-5, rtol 1e-5 (a bf16 rounding: 2e-3).
constexpr Tolerance kRopeF32Tol{1e-5, 2e-5};

void check_rope_f32(int B, int T, int D, int H, float theta, int pos0, uint64_t seed) {
  const size_t n = static_cast<size_t>(B) * T * 3 * D;
  const std::vector<float> qkv = random_f32_values(n, seed);
  const std::string what = " fp32 B=" + std::to_string(B) + " T=" + std::to_string(T) + " D=" + std::to_string(D) +
                           " H=" + std::to_string(H) + " pos0=" + std::to_string(pos0);
  for (bool forward : {true, false}) {
    DeviceArray<float> d_qkv(qkv);
    std::vector<double> ref(qkv.begin(), qkv.end());
    if (forward) {
      rope_forward(d_qkv.get(), B, T, D, H, theta, pos0, nullptr);
      cpu::rope_forward(ref.data(), B, T, D, H, static_cast<double>(theta), pos0);
    } else {
      rope_backward(d_qkv.get(), B, T, D, H, theta, pos0, nullptr);
      cpu::rope_backward(ref.data(), B, T, D, H, static_cast<double>(theta), pos0);
    }
    EXPECT_TRUE(all_close(d_qkv.download(), ref, kRopeF32Tol, (forward ? "rope_forward" : "rope_backward") + what));
  }
}

TEST(CudaRope, Fp32OddSizes) {
  PYLON_SKIP_WITHOUT_CUDA();
  check_rope_f32(2, 7, 36, 3, 10000.f, 5, 11);    // hd = 12: the scalar path
  check_rope_f32(3, 9, 256, 2, 500000.f, 3, 12);  // hd = 128: the 8-wide path
}

}  // namespace
}  // namespace pylon::cuda

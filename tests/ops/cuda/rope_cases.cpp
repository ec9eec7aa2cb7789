// CUDA rows: RoPE forward and backward in place against cpu::rope_forward/backward on the same qkv
// (bf16: in float on the bf16 values; fp32: in fp64).
#include "ops/cpu/ops.h"
#include "ops/cuda/cuda_op_cases.h"
#include "ops/cuda/rope.h"

namespace pylon::cuda::testing {
namespace {

// bf16: angles p·θ^(−2i/hd) reach ~1000 rad in fp32, where one ulp is 6e-5 rad; the GPU's and the
// CPU's θ^(−2i/hd), sin and cos may differ by an ulp, which moves an output by up to |x|·1.2e-4 ≈
// 7e-4 for |x| ≤ 5.5. The bf16 rtol stays; atol covers outputs that cancel to near zero.
constexpr Tolerance kRopeTol{.rtol = 1.6e-2, .atol = 1e-3};
// fp32 against the fp64 reference, positions below 12 (angles under 12 rad): the fp32 θ^(−2i/hd)
// and p·θ^(−2i/hd) (two roundings, ≤ 1.3e-6 rad) and sincosf (1 ulp) move an output by ≤ 6e-6 for
// the pair norms here (≤ 4.5): atol 2e-5, rtol 1e-5 (a bf16 rounding: 2e-3).
constexpr Tolerance kRopeF32Tol{.rtol = 1e-5, .atol = 2e-5};

std::string rope_shape(int B, int T, const HeadLayout& l, float theta, int pos0) {
  return shape_of({{"B", B}, {"T", T}, {"H", l.heads}, {"KV", l.kv_heads}, {"hd", l.head_dim},
                   {"theta", static_cast<long long>(theta)}, {"pos", pos0}});
}

OpCase rope_case(bool forward, DType d, int B, int T, HeadLayout l, float theta, int pos0, uint64_t seed,
                 RopeScaling scaling) {
  const std::string variant = scaling.on() ? "llama3 x" + std::to_string(static_cast<int>(scaling.factor)) : "";
  return cuda_case(forward ? "rope_forward" : "rope_backward", d, rope_shape(B, T, l, theta, pos0), variant,
                   [=](const OpRun& run) {
    const size_t n = static_cast<size_t>(B) * T * l.row();
    if (d == DType::bf16) {
      const std::vector<float> qkv = random_bf16_values(n, seed);
      DeviceArray<bf16> d_qkv(to_bf16(qkv));
      std::vector<float> ref = qkv;
      if (forward) {
        cuda::rope_forward(d_qkv.get(), B, T, l, theta, scaling, pos0, nullptr);
        cpu::rope_forward(ref.data(), B, T, l, theta, pos0, scaling);
      } else {
        cuda::rope_backward(d_qkv.get(), B, T, l, theta, scaling, pos0, nullptr);
        cpu::rope_backward(ref.data(), B, T, l, theta, pos0, scaling);
      }
      run.expect_close("qkv", to_float(d_qkv.download()), ref, DType::bf16, kRopeTol);
    } else {
      const std::vector<float> qkv = random_f32_values(n, seed);
      DeviceArray<float> d_qkv(qkv);
      std::vector<double> ref(qkv.begin(), qkv.end());
      if (forward) {
        cuda::rope_forward(d_qkv.get(), B, T, l, theta, scaling, pos0, nullptr);
        cpu::rope_forward(ref.data(), B, T, l, static_cast<double>(theta), pos0, scaling);
      } else {
        cuda::rope_backward(d_qkv.get(), B, T, l, theta, scaling, pos0, nullptr);
        cpu::rope_backward(ref.data(), B, T, l, static_cast<double>(theta), pos0, scaling);
      }
      run.expect_close("qkv", d_qkv.download(), ref, DType::f32, kRopeF32Tol);
    }
  });
}

}  // namespace

OpCase rope_forward(DType d, int B, int T, HeadLayout l, float theta, int pos0, uint64_t seed, RopeScaling scaling) {
  return rope_case(true, d, B, T, l, theta, pos0, seed, scaling);
}

OpCase rope_backward(DType d, int B, int T, HeadLayout l, float theta, int pos0, uint64_t seed, RopeScaling scaling) {
  return rope_case(false, d, B, T, l, theta, pos0, seed, scaling);
}

OpCase rope_backward_inverts_forward(int B, int T, HeadLayout l, float theta, int pos0, uint64_t seed) {
  return cuda_case("rope_backward", DType::bf16, rope_shape(B, T, l, theta, pos0), "of rope_forward",
                   [=](const OpRun& run) {
    const std::vector<float> qkv = random_bf16_values(static_cast<size_t>(B) * T * l.row(), seed);
    DeviceArray<bf16> d_qkv(to_bf16(qkv));
    cuda::rope_forward(d_qkv.get(), B, T, l, theta, {}, pos0, nullptr);
    cuda::rope_backward(d_qkv.get(), B, T, l, theta, {}, pos0, nullptr);
    // Two bf16 roundings of rotated pairs: each moves an element by up to 2^-9 of its pair's norm
    // (|pair| < 8 here), so ~3e-2 absolute at worst.
    run.expect_close("qkv", to_float(d_qkv.download()), qkv, DType::bf16, Tolerance{.rtol = 1e-2, .atol = 4e-2});
  });
}

}  // namespace pylon::cuda::testing

// CUDA rows: SiLU forward, backward and the fused recompute + backward against
// cpu::silu_forward/backward, SwiGLU's against cpu::swiglu_forward/backward (bf16: in float on the
// bf16 inputs; fp32: in fp64), the fused passes also bit for bit against the separate kernels. Tolerances: torch's (fp32: expf and one
// division, a few ulps).
#include "ops/cpu/ops.h"
#include "ops/cuda/cuda_op_cases.h"
#include "ops/cuda/silu.h"

namespace pylon::cuda::testing {
namespace {

template <typename T>
std::vector<T> tail(const std::vector<T>& v, size_t offset) {
  return std::vector<T>(v.begin() + static_cast<long>(offset), v.end());
}

std::string silu_variant(size_t offset, bool in_place) {
  std::string v = offset ? "unaligned" : "";
  if (in_place) v += v.empty() ? "in place" : " in place";
  return v;
}

// Inputs x = 3·N(0, 1) from `seed` and dy from `seed` + 1 (offset + n values, the first offset
// unused), and the reference y = silu(x), dx = silu'(x)·dy over the last n, in R.
template <typename R>
struct SiluData {
  std::vector<float> x, dy;
  std::vector<R> y, dx;
};
template <typename R>
SiluData<R> silu_data(DType d, size_t n, size_t offset, uint64_t seed) {
  SiluData<R> s;
  s.x = d == DType::bf16 ? random_bf16_values(n + offset, seed, 3.f) : random_f32_values(n + offset, seed, 3.f);
  s.dy = d == DType::bf16 ? random_bf16_values(n + offset, seed + 1) : random_f32_values(n + offset, seed + 1);
  const std::vector<R> xs(s.x.begin() + static_cast<long>(offset), s.x.end());
  const std::vector<R> dys(s.dy.begin() + static_cast<long>(offset), s.dy.end());
  s.y.resize(n), s.dx.resize(n);
  cpu::silu_forward(s.y.data(), xs.data(), static_cast<int64_t>(n));
  cpu::silu_backward(s.dx.data(), dys.data(), xs.data(), static_cast<int64_t>(n));
  return s;
}

}  // namespace

OpCase silu_forward(DType d, size_t n, size_t offset, uint64_t seed) {
  const std::string shape = shape_of({{"n", static_cast<long long>(n)}});
  return cuda_case("silu_forward", d, shape, silu_variant(offset, false), [=](const OpRun& run) {
    const auto ni = static_cast<int64_t>(n);
    if (d == DType::bf16) {
      const SiluData<float> s = silu_data<float>(d, n, offset, seed);
      DeviceArray<bf16> d_x(to_bf16(s.x)), d_y(n + offset);
      d_y.poison();
      cuda::silu_forward(d_y.get() + offset, d_x.get() + offset, ni, nullptr);
      run.expect_close("y", to_float(tail(d_y.download(), offset)), s.y, DType::bf16);
    } else {
      const SiluData<double> s = silu_data<double>(d, n, offset, seed);
      DeviceArray<float> d_x(s.x), d_y(n + offset);
      d_y.poison();
      cuda::silu_forward(d_y.get() + offset, d_x.get() + offset, ni, nullptr);
      run.expect_close("y", tail(d_y.download(), offset), s.y, DType::f32);
    }
  });
}

OpCase silu_backward(DType d, size_t n, size_t offset, bool in_place, uint64_t seed) {
  const std::string shape = shape_of({{"n", static_cast<long long>(n)}});
  return cuda_case("silu_backward", d, shape, silu_variant(offset, in_place), [=](const OpRun& run) {
    const auto ni = static_cast<int64_t>(n);
    if (d == DType::bf16) {
      const SiluData<float> s = silu_data<float>(d, n, offset, seed);
      DeviceArray<bf16> d_x(to_bf16(s.x)), d_dy(to_bf16(s.dy)), d_dx(n + offset);
      d_dx.poison();
      DeviceArray<bf16>& din = in_place ? d_dy : d_dx;
      cuda::silu_backward(din.get() + offset, d_dy.get() + offset, d_x.get() + offset, ni, nullptr);
      run.expect_close("dx", to_float(tail(din.download(), offset)), s.dx, DType::bf16);
    } else {
      const SiluData<double> s = silu_data<double>(d, n, offset, seed);
      DeviceArray<float> d_x(s.x), d_dy(s.dy), d_dx(n + offset);
      d_dx.poison();
      DeviceArray<float>& din = in_place ? d_dy : d_dx;
      cuda::silu_backward(din.get() + offset, d_dy.get() + offset, d_x.get() + offset, ni, nullptr);
      run.expect_close("dx", tail(din.download(), offset), s.dx, DType::f32);
    }
  });
}

// act = SiLU(x) and dx from one pass; in_place: act overwrites x and dx overwrites dy, as the
// model's backward uses it. bf16 also bit for bit against silu_forward + silu_backward.
OpCase silu_recompute_backward(DType d, size_t n, size_t offset, bool in_place, uint64_t seed) {
  const std::string shape = shape_of({{"n", static_cast<long long>(n)}});
  return cuda_case("silu_recompute_backward", d, shape, silu_variant(offset, in_place), [=](const OpRun& run) {
    const auto ni = static_cast<int64_t>(n);
    if (d == DType::bf16) {
      const SiluData<float> s = silu_data<float>(d, n, offset, seed);
      DeviceArray<bf16> d_x(to_bf16(s.x)), d_dy(to_bf16(s.dy)), d_y(n + offset), d_dx(n + offset);
      DeviceArray<bf16> d_y_sep(n + offset), d_dx_sep(n + offset);
      d_y.poison(), d_dx.poison(), d_y_sep.poison(), d_dx_sep.poison();
      cuda::silu_forward(d_y_sep.get() + offset, d_x.get() + offset, ni, nullptr);
      cuda::silu_backward(d_dx_sep.get() + offset, d_dy.get() + offset, d_x.get() + offset, ni, nullptr);
      DeviceArray<bf16>& act = in_place ? d_x : d_y;
      DeviceArray<bf16>& din = in_place ? d_dy : d_dx;
      cuda::silu_recompute_backward(act.get() + offset, din.get() + offset, d_dy.get() + offset, d_x.get() + offset,
                                    ni, nullptr);
      const std::vector<bf16> got_y = tail(act.download(), offset), got_dx = tail(din.download(), offset);
      run.expect_close("act", to_float(got_y), s.y, DType::bf16);
      run.expect_close("din", to_float(got_dx), s.dx, DType::bf16);
      run.expect_bitwise("act against silu_forward", got_y, tail(d_y_sep.download(), offset));
      run.expect_bitwise("din against silu_backward", got_dx, tail(d_dx_sep.download(), offset));
    } else {
      const SiluData<double> s = silu_data<double>(d, n, offset, seed);
      DeviceArray<float> d_x(s.x), d_dy(s.dy), d_act(n + offset), d_dx(n + offset);
      d_act.poison(), d_dx.poison();
      DeviceArray<float>& act = in_place ? d_x : d_act;
      DeviceArray<float>& din = in_place ? d_dy : d_dx;
      cuda::silu_recompute_backward(act.get() + offset, din.get() + offset, d_dy.get() + offset, d_x.get() + offset,
                                    ni, nullptr);
      run.expect_close("act", tail(act.download(), offset), s.y, DType::f32);
      run.expect_close("din", tail(din.download(), offset), s.dx, DType::f32);
    }
  });
}

// SwiGLU over (N, 2F) rows [gate | up] (gate 3·N(0, 1), up and dout N(0, 1)); in_place: din
// overwrites in and the recomputed act overwrites dout, as the model's backward uses it. F % 8 != 0
// is the scalar path. act is also checked bit for bit against swiglu_forward.
OpCase swiglu(DType d, int64_t N, int64_t F, bool in_place, uint64_t seed) {
  const std::string shape = shape_of({{"N", static_cast<long long>(N)}, {"F", static_cast<long long>(F)}});
  return cuda_case("swiglu", d, shape, in_place ? "forward, backward in place" : "forward, backward",
                   [=](const OpRun& run) {
    const size_t n = static_cast<size_t>(N * F);
    std::vector<float> in = d == DType::bf16 ? random_bf16_values(2 * n, seed) : random_f32_values(2 * n, seed);
    const std::vector<float> gates = d == DType::bf16 ? random_bf16_values(2 * n, seed + 1, 3.f)
                                                      : random_f32_values(2 * n, seed + 1, 3.f);
    for (int64_t r = 0; r < N; ++r)  // the gate halves at 3·N(0, 1)
      for (int64_t c = 0; c < F; ++c) in[static_cast<size_t>(r * 2 * F + c)] = gates[static_cast<size_t>(r * 2 * F + c)];
    const std::vector<float> dy = d == DType::bf16 ? random_bf16_values(n, seed + 2) : random_f32_values(n, seed + 2);
    auto reference = [&](auto zero) {
      using R = decltype(zero);
      const std::vector<R> in_r(in.begin(), in.end()), dy_r(dy.begin(), dy.end());
      std::vector<R> y(n), dx(2 * n);
      cpu::swiglu_forward(y.data(), in_r.data(), N, F);
      cpu::swiglu_backward(dx.data(), dy_r.data(), in_r.data(), N, F);
      return std::pair{y, dx};
    };
    if (d == DType::bf16) {
      const auto [y, dx] = reference(0.f);
      DeviceArray<bf16> d_in(to_bf16(in)), d_dy(to_bf16(dy)), d_y(n), d_dx(2 * n), d_act(n);
      d_y.poison(), d_dx.poison(), d_act.poison();
      cuda::swiglu_forward(d_y.get(), d_in.get(), N, F, nullptr);
      bf16* din = in_place ? d_in.get() : d_dx.get();
      bf16* act = in_place ? d_dy.get() : d_act.get();
      cuda::swiglu_backward(din, act, d_dy.get(), d_in.get(), N, F, nullptr);
      const std::vector<bf16> got_y = d_y.download();
      run.expect_close("out", to_float(got_y), y, DType::bf16);
      run.expect_close("din", to_float((in_place ? d_in : d_dx).download()), dx, DType::bf16);
      run.expect_bitwise("act against swiglu_forward", (in_place ? d_dy : d_act).download(), got_y);
    } else {
      const auto [y, dx] = reference(0.0);
      DeviceArray<float> d_in(in), d_dy(dy), d_y(n), d_dx(2 * n), d_act(n);
      d_y.poison(), d_dx.poison(), d_act.poison();
      cuda::swiglu_forward(d_y.get(), d_in.get(), N, F, nullptr);
      float* din = in_place ? d_in.get() : d_dx.get();
      float* act = in_place ? d_dy.get() : d_act.get();
      cuda::swiglu_backward(din, act, d_dy.get(), d_in.get(), N, F, nullptr);
      run.expect_close("out", d_y.download(), y, DType::f32);
      run.expect_close("din", (in_place ? d_in : d_dx).download(), dx, DType::f32);
      run.expect_close("act", (in_place ? d_dy : d_act).download(), y, DType::f32);
    }
  });
}

}  // namespace pylon::cuda::testing

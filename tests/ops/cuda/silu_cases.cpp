// CUDA rows: SiLU forward, backward and the fused recompute + backward against
// cpu::silu_forward/backward (bf16: in float on the bf16 inputs; fp32: in fp64), the fused pass
// also bit for bit against the two separate kernels. Tolerances: torch's (fp32: expf and one
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

}  // namespace pylon::cuda::testing

// CUDA rows: the residual add (bf16 and fp32 overloads) and the fp32 <-> bf16 casts, against the
// host sum and the host's round-to-nearest-even conversion, bit for bit: the kernels add in fp32
// and round once to the output type, as the host does here.
#include "ops/cuda/cast.h"
#include "ops/cuda/cuda_op_cases.h"
#include "ops/cuda/elementwise.h"

namespace pylon::cuda::testing {

OpCase cuda_case(std::string op, DType dtype, std::string shape, std::string variant,
                 std::function<void(const OpRun&)> run) {
  OpCase c{std::move(op), Backend::cuda, dtype, std::move(shape), std::move(variant), std::move(run), {}};
  c.skip = [] { return device_count() == 0 ? std::string("no CUDA device") : std::string(); };
  return c;
}

namespace {

std::vector<float> tail(const std::vector<float>& v, size_t offset) {
  return std::vector<float>(v.begin() + static_cast<long>(offset), v.end());
}

}  // namespace

OpCase residual_add(DType d, size_t n, bool in_place, uint64_t seed) {
  const std::string shape = shape_of({{"n", static_cast<long long>(n)}});
  return cuda_case("residual_add", d, shape, in_place ? "in place" : "", [=](const OpRun& run) {
    const auto ni = static_cast<int64_t>(n);
    if (d == DType::bf16) {
      const std::vector<float> a = random_bf16_values(n, seed), b = random_bf16_values(n, seed + 1);
      DeviceArray<bf16> d_a(to_bf16(a)), d_b(to_bf16(b)), d_out(n);
      d_out.poison();
      bf16* out = in_place ? d_a.get() : d_out.get();
      cuda::residual_add(out, d_a.get(), d_b.get(), ni, nullptr);
      std::vector<float> ref(n);
      for (size_t i = 0; i < n; ++i) ref[i] = round_bf16(a[i] + b[i]);
      run.expect_close("out", to_float((in_place ? d_a : d_out).download()), ref, DType::bf16, kExact);
    } else {
      const std::vector<float> a = random_f32_values(n, seed), b = random_f32_values(n, seed + 1);
      DeviceArray<float> d_a(a), d_b(b), d_out(n);
      d_out.poison();
      float* out = in_place ? d_a.get() : d_out.get();
      cuda::residual_add(out, d_a.get(), d_b.get(), ni, nullptr);
      std::vector<float> ref(n);
      for (size_t i = 0; i < n; ++i) ref[i] = a[i] + b[i];
      run.expect_close("out", (in_place ? d_a : d_out).download(), ref, DType::f32, kExact);
    }
  });
}

OpCase cast_f32_to_bf16(size_t n, size_t offset, uint64_t seed) {
  const std::string shape = shape_of({{"n", static_cast<long long>(n)}});
  return cuda_case("cast_f32_to_bf16", DType::bf16, shape, offset ? "unaligned" : "", [=](const OpRun& run) {
    const std::vector<float> x = random_f32_values(n + offset, seed, 3.f);
    DeviceArray<float> d_x(x);
    DeviceArray<bf16> d_y(n + offset);
    d_y.poison();
    cuda::cast_f32_to_bf16(d_y.get() + offset, d_x.get() + offset, static_cast<int64_t>(n), nullptr);
    // The reference is x itself, rounded to bf16 by the checker.
    run.expect_close("out", tail(to_float(d_y.download()), offset), tail(x, offset), DType::bf16, kExact);
  });
}

OpCase cast_bf16_to_f32(size_t n, size_t offset, uint64_t seed) {
  const std::string shape = shape_of({{"n", static_cast<long long>(n)}});
  return cuda_case("cast_bf16_to_f32", DType::bf16, shape, offset ? "unaligned" : "", [=](const OpRun& run) {
    std::vector<float> x = random_f32_values(n + offset, seed, 3.f);
    for (float& v : x) v = round_bf16(v);
    DeviceArray<bf16> d_x(to_bf16(x));
    DeviceArray<float> d_y(n + offset);
    d_y.poison();
    cuda::cast_bf16_to_f32(d_y.get() + offset, d_x.get() + offset, static_cast<int64_t>(n), nullptr);
    run.expect_close("out", tail(d_y.download(), offset), tail(x, offset), DType::f32, kExact);
  });
}

}  // namespace pylon::cuda::testing

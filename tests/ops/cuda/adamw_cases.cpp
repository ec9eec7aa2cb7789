// CUDA rows: AdamW, the deterministic sum of squares and the clipping coefficient against
// ops/cpu/adamw.cpp (the optimizer's CPU reference).
#include <algorithm>
#include <cmath>

#include "ops/cuda/adamw.h"
#include "ops/cuda/cuda_op_cases.h"
#include "ops/cuda/reduce.h"
#include "ops/cpu/adamw.h"

namespace pylon::cuda::testing {
namespace {

// The step's constants where adamw_update reads them.
DeviceArray<AdamWConstants> constants(const AdamWConfig& c, int64_t step) {
  return DeviceArray<AdamWConstants>(
      std::vector<AdamWConstants>{adamw_constants(c.lr, c.beta1, c.beta2, c.eps, c.weight_decay, step)});
}

template <typename T>
std::vector<T> tail(const std::vector<T>& v, size_t offset) {
  return std::vector<T>(v.begin() + static_cast<long>(offset), v.end());
}

std::string offset_variant(size_t offset, const std::string& more = "") {
  std::string v = offset ? "unaligned" : "";
  if (!more.empty()) v += (v.empty() ? "" : " ") + more;
  return v;
}

// Parameters `seed`, m + 1 (·0.1), v + 2 (|·0.01|), gradients + 3.
struct AdamWState {
  std::vector<float> p, m, v, g;
};
AdamWState adamw_state(size_t n, uint64_t seed) {
  AdamWState s{random_f32_values(n, seed), random_f32_values(n, seed + 1, 0.1f), random_f32_values(n, seed + 2, 0.01f),
               random_f32_values(n, seed + 3)};
  for (float& x : s.v) x = std::fabs(x);
  return s;
}

}  // namespace

// offset 1 leaves the buffers 4-byte aligned: the scalar path.
OpCase adamw_update(size_t n, size_t offset, int64_t step, bool scaled, bool bf16_copy, uint64_t seed) {
  std::string more = "step=" + std::to_string(step);
  if (scaled) more += " scaled";
  if (bf16_copy) more += " bf16 copy";
  return cuda_case("adamw_update", DType::f32, shape_of({{"n", static_cast<long long>(n)}}),
                   offset_variant(offset, more), [=](const OpRun& run) {
    AdamWState s = adamw_state(n + offset, seed);
    const float grad_scale = 0.37f;
    const AdamWConfig c{1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f};
    DeviceArray<float> d_p(s.p), d_m(s.m), d_v(s.v), d_g(s.g), d_scale(std::vector<float>{grad_scale});
    DeviceArray<bf16> d_pb(n + offset);
    d_pb.poison();
    const DeviceArray<AdamWConstants> k = constants(c, step);
    cuda::adamw_update(d_p.get() + offset, d_m.get() + offset, d_v.get() + offset, d_g.get() + offset,
                       bf16_copy ? d_pb.get() + offset : nullptr, static_cast<int64_t>(n), k.get(),
                       scaled ? d_scale.get() : nullptr, nullptr);
    if (scaled)
      for (float& x : s.g) x *= grad_scale;
    pylon::cpu::adamw_update(s.p.data() + offset, s.g.data() + offset, s.m.data() + offset, s.v.data() + offset,
                        static_cast<int64_t>(n), c.lr, c, step);
    run.expect_close("params", tail(d_p.download(), offset), tail(s.p, offset), DType::f32);
    run.expect_close("m", tail(d_m.download(), offset), tail(s.m, offset), DType::f32);
    run.expect_close("v", tail(d_v.download(), offset), tail(s.v, offset), DType::f32);
    if (bf16_copy)  // the reference: the fp32 parameters, rounded to bf16 by the checker
      run.expect_close("params_bf16", tail(to_float(d_pb.download()), offset), tail(s.p, offset), DType::bf16);
  });
}

// adamw_update with the grad norm folded in: the same update bit for bit as without, and
// *sumsq += Σ g² of the unscaled gradient against the CPU sum and the separate pass (fp32
// tolerance), added onto what was there (1.5), and the same bits on a repeat.
OpCase adamw_update_folded_norm(size_t n, size_t offset, bool scaled, uint64_t seed) {
  return cuda_case("adamw_update", DType::f32, shape_of({{"n", static_cast<long long>(n)}}),
                   offset_variant(offset, scaled ? "folded norm scaled" : "folded norm"), [=](const OpRun& run) {
    const AdamWState s = adamw_state(n + offset, seed);
    const AdamWConfig c{1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f};
    const auto ni = static_cast<int64_t>(n);
    DeviceArray<float> d_p(s.p), d_m(s.m), d_v(s.v), d_g(s.g), d_scale(std::vector<float>{0.37f});
    DeviceArray<float> d_p2(s.p), d_m2(s.m), d_v2(s.v), d_sumsq(std::vector<float>{1.5f}), d_sep(1);
    DeviceArray<bf16> d_pb(n + offset), d_pb2(n + offset);
    DeviceArray<char> ws(grad_sumsq_workspace_bytes(ni)), sep_ws(reduce_workspace_bytes(ni));
    d_pb.poison(), d_pb2.poison();
    const float* scale = scaled ? d_scale.get() : nullptr;
    const DeviceArray<AdamWConstants> step2 = constants(c, 2), step3 = constants(c, 3);
    cuda::adamw_update(d_p.get() + offset, d_m.get() + offset, d_v.get() + offset, d_g.get() + offset,
                       d_pb.get() + offset, ni, step2.get(), scale, nullptr);
    const GradSumOfSquares norm{d_sumsq.get(), ws.get()};
    cuda::adamw_update(d_p2.get() + offset, d_m2.get() + offset, d_v2.get() + offset, d_g.get() + offset,
                       d_pb2.get() + offset, ni, step2.get(), scale, nullptr, &norm);
    cuda::sum_of_squares(d_sep.get(), d_g.get() + offset, ni, sep_ws.get(), nullptr);

    run.expect_bitwise("params against the unfolded update", d_p2.download(), d_p.download());
    run.expect_bitwise("m against the unfolded update", d_m2.download(), d_m.download());
    run.expect_bitwise("v against the unfolded update", d_v2.download(), d_v.download());
    run.expect_bitwise("bf16 copy against the unfolded update", d_pb2.download(), d_pb.download());
    const double ref = pylon::cpu::sum_of_squares(s.g.data() + offset, ni);
    const std::vector<float> got = d_sumsq.download();
    run.expect_close("sumsq", got, std::vector<double>{1.5 + ref}, DType::f32);
    run.expect_close("sumsq against sum_of_squares", std::vector<float>{got[0] - 1.5f}, d_sep.download(), DType::f32);
    d_sumsq.upload({1.5f});
    cuda::adamw_update(d_p2.get() + offset, d_m2.get() + offset, d_v2.get() + offset, d_g.get() + offset, nullptr, ni,
                       step3.get(), scale, nullptr, &norm);
    run.expect_bitwise("sumsq, second run", d_sumsq.download(), got);
  });
}

// Σ x² of n values (x from seed n, starting at offset), deterministic.
OpCase sum_of_squares(size_t n, size_t offset) {
  return cuda_case("sum_of_squares", DType::f32, shape_of({{"n", static_cast<long long>(n)}}), offset_variant(offset),
                   [=](const OpRun& run) {
    const std::vector<float> x = random_f32_values(n + 1, n);
    DeviceArray<float> d_x(x), d_out(1);
    DeviceArray<char> ws(reduce_workspace_bytes(static_cast<int64_t>(n)));
    d_out.poison();
    cuda::sum_of_squares(d_out.get(), d_x.get() + offset, static_cast<int64_t>(n), ws.get(), nullptr);
    const std::vector<float> got = d_out.download();
    const double ref = pylon::cpu::sum_of_squares(x.data() + offset, static_cast<int64_t>(n));
    run.expect_close("sum", got, std::vector<double>{ref}, DType::f32);
    cuda::sum_of_squares(d_out.get(), d_x.get() + offset, static_cast<int64_t>(n), ws.get(), nullptr);
    run.expect_bitwise("sum, second run", d_out.download(), got);
  });
}

// accumulate: two passes over the same buffer into one total.
OpCase sum_of_squares_accumulate(size_t n) {
  return cuda_case("sum_of_squares", DType::f32, shape_of({{"n", static_cast<long long>(n)}}), "accumulate",
                   [=](const OpRun& run) {
    const std::vector<float> x = random_f32_values(n + 1, n);
    DeviceArray<float> d_x(x), d_out(1);
    DeviceArray<char> ws(reduce_workspace_bytes(static_cast<int64_t>(n)));
    d_out.poison();
    cuda::sum_of_squares(d_out.get(), d_x.get(), static_cast<int64_t>(n), ws.get(), nullptr);
    cuda::sum_of_squares(d_out.get(), d_x.get(), static_cast<int64_t>(n), ws.get(), nullptr, true);
    const double ref = 2 * pylon::cpu::sum_of_squares(x.data(), static_cast<int64_t>(n));
    run.expect_close("sum", d_out.download(), std::vector<double>{ref}, DType::f32);
  });
}

// min(1, max_norm / (sqrt(sumsq) + 1e-6)), 1 when max_norm is 0 (no clipping).
OpCase clip_coefficient(float sumsq, float max_norm) {
  const std::string shape = "sumsq=" + format_number(sumsq) + " max_norm=" + format_number(max_norm);
  return cuda_case("clip_coefficient", DType::f32, shape, "", [=](const OpRun& run) {
    DeviceArray<float> d_sumsq(std::vector<float>{sumsq}), d_coef(1);
    d_coef.poison();
    cuda::clip_coefficient(d_coef.get(), d_sumsq.get(), max_norm, nullptr);
    const double want = max_norm > 0 ? std::min(1.0, max_norm / (std::sqrt(double{sumsq}) + 1e-6)) : 1.0;
    run.expect_close("coef", d_coef.download(), std::vector<double>{want}, DType::f32);
  });
}

}  // namespace pylon::cuda::testing

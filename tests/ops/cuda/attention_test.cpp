// The CUDA flash attention against the CPU reference (pylon::cpu::attention_*) in float on the same
// bf16-rounded inputs, element by element, over head dims, masks and awkward sequence lengths.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "core/rng.h"
#include "ops/cpu/gemm.h"
#include "ops/cpu/ops.h"
#include "ops/cuda/attention.h"
#include "ops/cuda/runtime.h"

namespace pylon::cuda {
namespace {

using bf16 = __nv_bfloat16;

// Tolerances, |gpu - ref| <= atol + rtol·|ref|, ref rounded to bf16 where the output is bf16.
// rtol: torch.testing's bf16 default (2^-6 ≈ 1.6e-2, four ulps of bf16's 8-bit mantissa).
constexpr double kRtolBf16 = 1.6e-2;
// out: the kernel rounds p to bf16 before p·v, a relative error of at most 2^-9 per term, so
// |Δout_i| <= 2^-9 · Σ_j p_ij |v_j| <= 2^-9 with |v| <= 1 (the test's inputs); fp32 sums add ~1e-6.
constexpr double kAtolOut = 1.0 / 512;
// lse (fp32 out): exact bf16 products summed in fp32 over hd terms (|s| < 30, ~1e-5), then a
// 2^-22-accurate exp2 and a log over <= 1024 terms: far below 1e-3 on values around ln T.
constexpr double kAtolLse = 1e-3;
constexpr double kRtolLse = 1e-5;
// dq, dk, dv: sums over T terms of bf16-rounded p or ds (2^-9 relative each) in which large terms
// cancel (Σ_j ds_ij = 0), so the error scales with the largest gradient of the tensor, not with each
// element: atol = 2^-7 · max|ref| (two bf16 ulps at the tensor's largest magnitude), plus
// torch.testing's 1e-5 floor for tensors that are exactly 0 (T = 1: dq = dk = 0, the GPU's dsum from
// the bf16 output leaves ~1e-7).
constexpr double kAtolGradOfMax = 1.0 / 128;
constexpr double kAtolGradFloor = 1e-5;

float bf16_round(float x) { return __bfloat162float(__float2bfloat16(x)); }

// default: the public functions (wgmma kernels on Hopper); mma: the mma.sync kernels, on any GPU;
// ws: the warp-specialised TMA forward and backward passes (Hopper only).
enum class Kernels { default_path, mma, ws };

struct Case {
  int B, T, H, hd;
  bool causal;
  bool backward;
  Kernels kernels;
};

std::string case_name(const testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  return "B" + std::to_string(c.B) + "_T" + std::to_string(c.T) + "_H" + std::to_string(c.H) + "_hd" +
         std::to_string(c.hd) + (c.causal ? "_causal" : "_full") +
         (c.kernels == Kernels::mma ? "_mma" : c.kernels == Kernels::ws ? "_ws" : "_default");
}

// Uniform in [-scale, scale), rounded to bf16: the float copy is exactly what the GPU reads.
void fill_uniform(std::vector<float>& f, std::vector<bf16>& h, uint64_t seed, uint64_t stream, float scale) {
  for (size_t i = 0; i < f.size(); ++i) {
    h[i] = __float2bfloat16(static_cast<float>((2.0 * random_uniform(seed, stream, i) - 1.0) * scale));
    f[i] = __bfloat162float(h[i]);
  }
}

// Per-element check; returns the largest |gpu - ref| / (atol + rtol·|ref|) (<= 1 passes).
double expect_close(const char* what, const std::vector<float>& gpu, const std::vector<float>& ref, double atol,
                    double rtol, bool round_ref) {
  EXPECT_EQ(gpu.size(), ref.size());
  double worst = 0, max_err = 0;
  int failures = 0;
  for (size_t i = 0; i < gpu.size(); ++i) {
    const double r = round_ref ? bf16_round(ref[i]) : ref[i];
    const double err = std::fabs(gpu[i] - r), tol = atol + rtol * std::fabs(r);
    if (!(err <= tol)) {  // NaN fails too
      if (++failures <= 5) ADD_FAILURE() << what << "[" << i << "] = " << gpu[i] << ", reference " << r;
      worst = std::numeric_limits<double>::infinity();
    } else {
      worst = std::max(worst, err / tol);
    }
    if (!(err <= max_err)) max_err = err;
  }
  EXPECT_EQ(failures, 0) << what << ": " << failures << " of " << gpu.size() << " elements out of tolerance";
  std::printf("    %-4s max |err| %.3g (atol %.3g), worst err/tol %.3f\n", what, max_err, atol, worst);
  return worst;
}

double max_abs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, static_cast<double>(std::fabs(x)));
  return m;
}

// lse (B, H, T) = ln Σ_j exp(q_i·k_j / sqrt(hd)) over unmasked keys, in double from float scores.
std::vector<float> reference_lse(const std::vector<float>& qkv, int B, int T, int D, int H, bool causal) {
  const int hd = D / H, ld = 3 * D;
  std::vector<float> lse(static_cast<size_t>(B) * H * T), s(static_cast<size_t>(T) * T);
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < H; ++h) {
      const float* q = qkv.data() + static_cast<size_t>(b) * T * ld + h * hd;
      cpu::gemm<float>(false, true, T, T, hd, 1.0f / std::sqrt(static_cast<float>(hd)), q, ld, q + D, ld, 0.0f,
                       s.data(), T);
      for (int i = 0; i < T; ++i) {
        const int n = causal ? i + 1 : T;
        double mx = -INFINITY, sum = 0;
        for (int j = 0; j < n; ++j) mx = std::max(mx, static_cast<double>(s[static_cast<size_t>(i) * T + j]));
        for (int j = 0; j < n; ++j) sum += std::exp(s[static_cast<size_t>(i) * T + j] - mx);
        lse[(static_cast<size_t>(b) * H + h) * T + i] = static_cast<float>(mx + std::log(sum));
      }
    }
  }
  return lse;
}

template <typename T>
std::vector<float> download(const DeviceBuffer& buf, size_t n) {
  std::vector<T> host(n);
  PYLON_CUDA_CHECK(cudaMemcpy(host.data(), buf.get(), n * sizeof(T), cudaMemcpyDeviceToHost));
  std::vector<float> f(n);
  for (size_t i = 0; i < n; ++i) {
    if constexpr (std::is_same_v<T, bf16>) f[i] = __bfloat162float(host[i]);
    else f[i] = host[i];
  }
  return f;
}

// Runs forward (and backward) through `tiles`, or through the public functions when tiles is null,
// and compares every output element with the CPU reference.
void check_against_cpu(const Case& c, const detail::AttentionTiles* tiles) {
  const int D = c.H * c.hd;
  const size_t n_qkv = static_cast<size_t>(c.B) * c.T * 3 * D, n_out = static_cast<size_t>(c.B) * c.T * D;
  const size_t n_lse = static_cast<size_t>(c.B) * c.H * c.T;
  const uint64_t seed = 1000u + static_cast<uint64_t>(c.T) * 7 + static_cast<uint64_t>(c.hd) + (c.causal ? 1 : 0);

  // q and k in [-2, 2] (scores of std ~1.3: softmax neither flat nor one-hot); v, dout in [-1, 1].
  std::vector<float> qkv(n_qkv), scratch(n_out);
  std::vector<bf16> qkv_h(n_qkv);
  fill_uniform(qkv, qkv_h, seed, 0, 2.0f);
  for (int64_t row = 0; row < static_cast<int64_t>(c.B) * c.T; ++row) {  // v third: rescale to [-1, 1]
    for (int col = 2 * D; col < 3 * D; ++col) {
      const size_t i = static_cast<size_t>(row) * 3 * D + col;
      qkv_h[i] = __float2bfloat16(qkv[i] * 0.5f);  // exact: halving a bf16
      qkv[i] = __bfloat162float(qkv_h[i]);
    }
  }

  Stream stream;
  DeviceBuffer qkv_d(n_qkv * sizeof(bf16)), out_d(n_out * sizeof(bf16)), lse_d(n_lse * sizeof(float));
  PYLON_CUDA_CHECK(cudaMemcpy(qkv_d.get(), qkv_h.data(), n_qkv * sizeof(bf16), cudaMemcpyHostToDevice));
  // Poison on the kernels' stream: it is non-blocking, so a cudaMemset (legacy stream) is not ordered with it.
  PYLON_CUDA_CHECK(cudaMemsetAsync(out_d.get(), 0xFF, out_d.bytes(), stream.get()));  // NaN in bf16 and fp32
  PYLON_CUDA_CHECK(cudaMemsetAsync(lse_d.get(), 0xFF, lse_d.bytes(), stream.get()));
  if (tiles)
    detail::attention_forward_tiled(*tiles, out_d.as<bf16>(), lse_d.as<float>(), qkv_d.as<bf16>(), c.B, c.T, D, c.H,
                                    c.causal, stream.get());
  else
    attention_forward(out_d.as<bf16>(), lse_d.as<float>(), qkv_d.as<bf16>(), c.B, c.T, D, c.H, c.causal,
                      stream.get());
  stream.synchronize();

  std::vector<float> out_ref(n_out), probs(static_cast<size_t>(c.B) * c.H * c.T * c.T);
  cpu::attention_forward(out_ref.data(), probs.data(), qkv.data(), c.B, c.T, D, c.H, c.causal);
  expect_close("out", download<bf16>(out_d, n_out), out_ref, kAtolOut, kRtolBf16, true);
  expect_close("lse", download<float>(lse_d, n_lse), reference_lse(qkv, c.B, c.T, D, c.H, c.causal), kAtolLse,
               kRtolLse, false);
  if (!c.backward) return;

  std::vector<float> dout(n_out);
  std::vector<bf16> dout_h(n_out);
  fill_uniform(dout, dout_h, seed, 1, 1.0f);
  DeviceBuffer dout_d(n_out * sizeof(bf16)), dqkv_d(n_qkv * sizeof(bf16));
  const size_t ws_bytes = attention_backward_workspace_bytes(c.B, c.T, D, c.H);
  DeviceBuffer ws_d(ws_bytes);
  PYLON_CUDA_CHECK(cudaMemcpy(dout_d.get(), dout_h.data(), n_out * sizeof(bf16), cudaMemcpyHostToDevice));
  PYLON_CUDA_CHECK(cudaMemsetAsync(dqkv_d.get(), 0xFF, dqkv_d.bytes(), stream.get()));
  PYLON_CUDA_CHECK(cudaMemsetAsync(ws_d.get(), 0xFF, ws_d.bytes(), stream.get()));
  if (tiles)
    detail::attention_backward_tiled(*tiles, dqkv_d.as<bf16>(), dout_d.as<bf16>(), qkv_d.as<bf16>(), out_d.as<bf16>(),
                                     lse_d.as<float>(), c.B, c.T, D, c.H, c.causal, ws_d.get(), ws_bytes,
                                     stream.get());
  else
    attention_backward(dqkv_d.as<bf16>(), dout_d.as<bf16>(), qkv_d.as<bf16>(), out_d.as<bf16>(), lse_d.as<float>(),
                       c.B, c.T, D, c.H, c.causal, ws_d.get(), ws_bytes, stream.get());
  stream.synchronize();

  std::vector<float> dqkv_ref(n_qkv);
  cpu::attention_backward(dqkv_ref.data(), dout.data(), qkv.data(), probs.data(), c.B, c.T, D, c.H);
  const std::vector<float> dqkv = download<bf16>(dqkv_d, n_qkv);
  const char* names[3] = {"dq", "dk", "dv"};
  for (int part = 0; part < 3; ++part) {  // compare each third with its own atol
    std::vector<float> got, ref;
    for (int64_t row = 0; row < static_cast<int64_t>(c.B) * c.T; ++row) {
      const size_t begin = static_cast<size_t>(row) * 3 * D + static_cast<size_t>(part) * D;
      got.insert(got.end(), dqkv.begin() + begin, dqkv.begin() + begin + D);
      ref.insert(ref.end(), dqkv_ref.begin() + begin, dqkv_ref.begin() + begin + D);
    }
    expect_close(names[part], got, ref, kAtolGradFloor + kAtolGradOfMax * max_abs(ref), kRtolBf16, true);
  }
}

class CudaAttention : public testing::TestWithParam<Case> {};

// The warp-specialised kernels' tiles; false where they cannot run (not a Hopper GPU or not an sm_90a build).
bool ws_tiles_if_supported(int hd, detail::AttentionTiles& tiles) {
  tiles = detail::warp_specialized_tiles(hd);
  return tiles.wgmma;
}

TEST_P(CudaAttention, MatchesCpuReference) {
  if (pylon::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const Case& c = GetParam();
  detail::AttentionTiles tiles;  // mma: the default shapes with wgmma off
  tiles.wgmma = false;
  if (c.kernels == Kernels::ws && !ws_tiles_if_supported(c.hd, tiles))
    GTEST_SKIP() << "the warp-specialised kernels need a Hopper GPU and an sm_90a build";
  check_against_cpu(c, c.kernels == Kernels::default_path ? nullptr : &tiles);
}

std::vector<Case> small_cases() {
  std::vector<Case> cases;
  for (Kernels k : {Kernels::default_path, Kernels::mma})
    for (int hd : {64, 128})
      for (bool causal : {false, true})
        for (int T : {1, 77, 128, 1024}) cases.push_back({2, T, 2, hd, causal, true, k});
  // The warp-specialised forward (then the backward with the warp-specialised dk/dv pass where the CPU
  // reference is cheap) at B·H = 15: the tensor maps' batch dimension and head column offsets beyond the first.
  for (int hd : {64, 128})
    for (bool causal : {false, true})
      for (int T : {1, 77, 128, 1024}) cases.push_back({3, T, 5, hd, causal, T <= 128, Kernels::ws});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(CudaAttentionSmall, CudaAttention, testing::ValuesIn(small_cases()), case_name);
// The benchmark's shape (seed preset: D = 2048, H = 16, T = 1024), forward only, a smaller batch.
INSTANTIATE_TEST_SUITE_P(CudaAttentionSeed, CudaAttention,
                         testing::Values(Case{2, 1024, 16, 128, false, false, Kernels::default_path},
                                         Case{2, 1024, 16, 128, true, false, Kernels::default_path}),
                         case_name);

// Every compiled tile shape (the benchmark's sweep may promote any of them to the default) at a length
// that leaves partial tiles of 32, 64 and 128.
TEST(CudaAttentionTiles, EveryCompiledShapeMatchesCpuReference) {
  if (pylon::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  for (int hd : {64, 128})
    for (bool causal : {false, true})
      for (const detail::AttentionTiles& tiles : detail::compiled_attention_tiles(hd)) {
        SCOPED_TRACE(testing::Message() << "hd " << hd << (causal ? " causal" : " full") << (tiles.wgmma ? " wgmma" : " mma")
                                        << " fwd " << tiles.fwd_warps << "/" << tiles.fwd_block_n << " dkdv "
                                        << tiles.dkdv_warps << "/" << tiles.dkdv_block_m << " dq " << tiles.dq_warps
                                        << "/" << tiles.dq_block_n << (tiles.fwd_ws ? " ws stages " : "")
                                        << (tiles.fwd_ws ? std::to_string(tiles.fwd_stages) : "")
                                        << (tiles.bwd_ws ? " ws dkdv stages " + std::to_string(tiles.bwd_stages) : "")
                                        << (tiles.dq_ws ? " ws dq" : ""));
        check_against_cpu(Case{1, 200, 2, hd, causal, true, Kernels::default_path}, &tiles);
      }
}

// The seed preset's shape with more thread blocks than the GPU holds at once: the default path must give
// bit-identical dqkv on a second run and agree with the mma.sync path. (Written for a one-pass backward
// whose dq sums wait on other blocks, bench/attention_notes.md; it holds any backward to both.)
TEST(CudaAttentionBackward, LargeGridDeterministicAndMatchesMmaPath) {
  if (pylon::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const int B = 4, T = 1024, H = 16, hd = 128, D = H * hd;
  const size_t n_qkv = static_cast<size_t>(B) * T * 3 * D, n_out = static_cast<size_t>(B) * T * D;
  std::vector<float> qkv(n_qkv), dout(n_out);
  std::vector<bf16> qkv_h(n_qkv), dout_h(n_out);
  fill_uniform(qkv, qkv_h, 77, 0, 1.0f);
  fill_uniform(dout, dout_h, 77, 1, 1.0f);
  Stream stream;
  DeviceBuffer qkv_d(n_qkv * sizeof(bf16)), dout_d(n_out * sizeof(bf16)), out_d(n_out * sizeof(bf16));
  DeviceBuffer lse_d(static_cast<size_t>(B) * H * T * sizeof(float));
  const size_t ws_bytes = attention_backward_workspace_bytes(B, T, D, H);
  DeviceBuffer ws_d(ws_bytes);
  PYLON_CUDA_CHECK(cudaMemcpy(qkv_d.get(), qkv_h.data(), n_qkv * sizeof(bf16), cudaMemcpyHostToDevice));
  PYLON_CUDA_CHECK(cudaMemcpy(dout_d.get(), dout_h.data(), n_out * sizeof(bf16), cudaMemcpyHostToDevice));
  for (bool causal : {false, true}) {
    SCOPED_TRACE(causal ? "causal" : "full");
    attention_forward(out_d.as<bf16>(), lse_d.as<float>(), qkv_d.as<bf16>(), B, T, D, H, causal, stream.get());
    auto run = [&](const detail::AttentionTiles& tiles) {
      DeviceBuffer dqkv_d(n_qkv * sizeof(bf16));
      PYLON_CUDA_CHECK(cudaMemsetAsync(dqkv_d.get(), 0xFF, dqkv_d.bytes(), stream.get()));
      PYLON_CUDA_CHECK(cudaMemsetAsync(ws_d.get(), 0xFF, ws_d.bytes(), stream.get()));
      detail::attention_backward_tiled(tiles, dqkv_d.as<bf16>(), dout_d.as<bf16>(), qkv_d.as<bf16>(),
                                       out_d.as<bf16>(), lse_d.as<float>(), B, T, D, H, causal, ws_d.get(), ws_bytes,
                                       stream.get());
      stream.synchronize();
      return download<bf16>(dqkv_d, n_qkv);
    };
    const detail::AttentionTiles tiles = detail::default_attention_tiles(hd);
    detail::AttentionTiles mma_tiles;
    mma_tiles.wgmma = false;
    const std::vector<float> first = run(tiles), second = run(tiles), mma = run(mma_tiles);
    size_t differ = 0;
    for (size_t i = 0; i < n_qkv; ++i) differ += std::memcmp(&first[i], &second[i], sizeof(float)) != 0;
    EXPECT_EQ(differ, 0u) << "elements that changed between two runs";
    // Each path is within (kAtolGradOfMax·max, kRtolBf16) of the exact result (the small cases check
    // that against the CPU), so the two are within twice that of each other.
    expect_close("dqkv", first, mma, 2 * kAtolGradOfMax * max_abs(mma), 2 * kRtolBf16, false);
    detail::AttentionTiles ws_tiles;  // the warp-specialised dk/dv pass, each stage count: many query tiles
    if (ws_tiles_if_supported(hd, ws_tiles))
      for (const int stages : {2, 3}) {
        SCOPED_TRACE(testing::Message() << "ws dkdv stages " << stages);
        ws_tiles.bwd_stages = stages;
        const std::vector<float> ws1 = run(ws_tiles), ws2 = run(ws_tiles);
        EXPECT_EQ(std::memcmp(ws1.data(), ws2.data(), n_qkv * sizeof(float)), 0) << "changed between two runs";
        expect_close("dqkv (ws)", ws1, mma, 2 * kAtolGradOfMax * max_abs(mma), 2 * kRtolBf16, false);
      }
  }
}

// The warp-specialised forward against today's wgmma forward on one input, every compiled ws shape:
// both within (kAtolOut, kRtolBf16) of the exact output, so within twice that of each other; lse
// likewise. T = 1000 leaves a partial tile of 104 (of 128) and 40 (of 64) keys; B·H = 15.
TEST(CudaAttentionForwardWs, MatchesWgmmaForward) {
  if (pylon::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  detail::AttentionTiles probe;
  if (!ws_tiles_if_supported(128, probe)) GTEST_SKIP() << "the warp-specialised forward needs Hopper and sm_90a";
  const int B = 3, T = 1000, H = 5;
  for (int hd : {64, 128}) {
    const int D = H * hd;
    const size_t n_qkv = static_cast<size_t>(B) * T * 3 * D, n_out = static_cast<size_t>(B) * T * D;
    const size_t n_lse = static_cast<size_t>(B) * H * T;
    std::vector<float> qkv(n_qkv);
    std::vector<bf16> qkv_h(n_qkv);
    fill_uniform(qkv, qkv_h, 4242 + hd, 0, 2.0f);
    Stream stream;
    DeviceBuffer qkv_d(n_qkv * sizeof(bf16)), out_d(n_out * sizeof(bf16)), lse_d(n_lse * sizeof(float));
    PYLON_CUDA_CHECK(cudaMemcpy(qkv_d.get(), qkv_h.data(), n_qkv * sizeof(bf16), cudaMemcpyHostToDevice));
    auto run = [&](const detail::AttentionTiles& tiles, bool causal) {
      PYLON_CUDA_CHECK(cudaMemsetAsync(out_d.get(), 0xFF, out_d.bytes(), stream.get()));  // NaN
      PYLON_CUDA_CHECK(cudaMemsetAsync(lse_d.get(), 0xFF, lse_d.bytes(), stream.get()));
      detail::attention_forward_tiled(tiles, out_d.as<bf16>(), lse_d.as<float>(), qkv_d.as<bf16>(), B, T, D, H,
                                      causal, stream.get());
      stream.synchronize();
      return std::make_pair(download<bf16>(out_d, n_out), download<float>(lse_d, n_lse));
    };
    detail::AttentionTiles wgmma_tiles;  // today's default forward (4 warps, 64 keys), whatever the environment
    wgmma_tiles.wgmma = true;
    for (bool causal : {false, true}) {
      const auto [out_ref, lse_ref] = run(wgmma_tiles, causal);
      for (const detail::AttentionTiles& tiles : detail::compiled_attention_tiles(hd)) {
        if (!tiles.fwd_ws) continue;
        SCOPED_TRACE(testing::Message() << "hd " << hd << (causal ? " causal" : " full") << " ws block_n "
                                        << tiles.fwd_block_n << " stages " << tiles.fwd_stages);
        const auto [out, lse] = run(tiles, causal);
        expect_close("out", out, out_ref, 2 * kAtolOut, 2 * kRtolBf16, false);
        expect_close("lse", lse, lse_ref, 2 * kAtolLse, 2 * kRtolLse, false);
      }
    }
  }
}

TEST(CudaAttentionArgs, RejectsUnsupportedHeadDim) {
  if (pylon::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  DeviceBuffer buf(1 << 20);
  EXPECT_THROW(attention_forward(buf.as<bf16>(), buf.as<float>(), buf.as<bf16>(), 1, 4, 96, 1, false, nullptr),
               pylon::Error);
}

}  // namespace
}  // namespace pylon::cuda

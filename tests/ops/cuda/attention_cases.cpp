// CUDA rows: flash attention (bf16: every kernel family and compiled tile shape, and the row-per-warp
// kernel of the other head dims; fp32) against the CPU reference (cpu::attention_forward/backward) on
// the same inputs, element by element, over head layouts (multi-head, grouped-query, multi-query), head
// dims, masks and awkward sequence lengths; the warp-specialised and large-grid paths also against
// their mma / wgmma oracles.
#include <algorithm>
#include <cmath>
#include <utility>

#include "ops/cpu/gemm.h"
#include "ops/cpu/ops.h"
#include "ops/cuda/attention.h"
#include "ops/cuda/attention_fp32.h"
#include "ops/cuda/cuda_op_cases.h"

namespace pylon::cuda::testing {
namespace {

// bf16 tolerances, |gpu − ref| <= atol + rtol·|ref|, ref rounded to bf16 where the output is bf16.
// rtol: torch.testing's bf16 default (2^-6 ≈ 1.6e-2, four ulps of bf16's 8-bit mantissa).
constexpr double kRtolBf16 = 1.6e-2;
// out: the kernel rounds p to bf16 before p·v, a relative error of at most 2^-9 per term, so
// |Δout_i| <= 2^-9 · Σ_j p_ij |v_j| <= 2^-9 with |v| <= 1 (the rows' inputs); fp32 sums add ~1e-6.
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

// fp32 tolerances. Scores are fp32 dot products over hd terms of |q·k| <= 4 (rounding ~1e-6 of the
// score), p = exp(s − m) with expf's 2 ulps, sums over <= 128 keys in fp32: relative errors of ~1e-6
// throughout, so 1e-4 leaves two orders of margin while a bf16 rounding anywhere (2^-9 = 2e-3) or a
// wrong index fails. Gradients: as for bf16, atol = 1e-4·max|ref| (+ 1e-6 for tensors that are
// exactly 0: T = 1).
constexpr double kF32Rtol = 1e-4;
constexpr double kF32AtolOut = 1e-5;  // |out| <= 1
constexpr double kF32AtolLse = 1e-5;
constexpr double kF32AtolGradOfMax = 1e-4;
constexpr double kF32AtolGradFloor = 1e-6;

struct Case {
  int B, T;
  HeadLayout heads;
  bool causal;
  AttentionKernels kernels;
};

std::string attention_shape(int B, int T, const HeadLayout& l) {
  return shape_of({{"B", B}, {"T", T}, {"H", l.heads}, {"KV", l.kv_heads}, {"hd", l.head_dim}});
}
std::string kernels_name(AttentionKernels k) {
  return k == AttentionKernels::mma ? "mma" : k == AttentionKernels::ws ? "ws" : "default";
}

// Uniform in [-scale, scale), rounded to bf16: the float copy is exactly what the GPU reads.
void fill_uniform(std::vector<float>& f, std::vector<bf16>& h, uint64_t seed, uint64_t stream, float scale) {
  for (size_t i = 0; i < f.size(); ++i) {
    h[i] = __float2bfloat16(static_cast<float>((2.0 * random_uniform(seed, stream, i) - 1.0) * scale));
    f[i] = __bfloat162float(h[i]);
  }
}

// Uniform in [−scale, scale), fp32.
std::vector<float> uniform(size_t n, uint64_t seed, uint64_t stream, float scale) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>((2.0 * random_uniform(seed, stream, i) - 1.0) * scale);
  return v;
}

template <typename T>
double max_abs(const std::vector<T>& v) {
  double m = 0;
  for (T x : v) m = std::max(m, std::fabs(static_cast<double>(x)));
  return m;
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

// Column offsets in a qkv row of query head h's q and of its key and value head's k and v.
size_t q_col(const HeadLayout& l, int h) { return static_cast<size_t>(h) * l.head_dim; }
size_t k_col(const HeadLayout& l, int h) { return l.q_dim() + static_cast<size_t>(h / l.group()) * l.head_dim; }

// lse (B, heads, T) = ln Σ_j exp(q_i·k_j / sqrt(hd)) over unmasked keys, in double from float scores.
std::vector<float> reference_lse(const std::vector<float>& qkv, int B, int T, const HeadLayout& l, bool causal) {
  const int hd = l.head_dim, ld = l.row();
  std::vector<float> lse(static_cast<size_t>(B) * l.heads * T), s(static_cast<size_t>(T) * T);
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < l.heads; ++h) {
      const float* rows = qkv.data() + static_cast<size_t>(b) * T * ld;
      cpu::gemm<float>(false, true, T, T, hd, 1.0f / std::sqrt(static_cast<float>(hd)), rows + q_col(l, h), ld,
                       rows + k_col(l, h), ld, 0.0f, s.data(), T);
      for (int i = 0; i < T; ++i) {
        const int n = causal ? i + 1 : T;
        double mx = -INFINITY, sum = 0;
        for (int j = 0; j < n; ++j) mx = std::max(mx, static_cast<double>(s[static_cast<size_t>(i) * T + j]));
        for (int j = 0; j < n; ++j) sum += std::exp(s[static_cast<size_t>(i) * T + j] - mx);
        lse[(static_cast<size_t>(b) * l.heads + h) * T + i] = static_cast<float>(mx + std::log(sum));
      }
    }
  }
  return lse;
}

// lse (B, heads, T) in fp64 from fp64 scores.
std::vector<double> reference_lse(const std::vector<double>& qkv, int B, int T, const HeadLayout& l, bool causal) {
  const int hd = l.head_dim;
  const size_t ld = static_cast<size_t>(l.row());
  std::vector<double> lse(static_cast<size_t>(B) * l.heads * T);
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < l.heads; ++h)
      for (int i = 0; i < T; ++i) {
        const double* q = qkv.data() + (static_cast<size_t>(b) * T + i) * ld + q_col(l, h);
        std::vector<double> s;
        for (int j = 0; j < (causal ? i + 1 : T); ++j) {
          const double* k = qkv.data() + (static_cast<size_t>(b) * T + j) * ld + k_col(l, h);
          double dot = 0;
          for (int c = 0; c < hd; ++c) dot += q[c] * k[c];
          s.push_back(dot * scale);
        }
        const double mx = *std::max_element(s.begin(), s.end());
        double sum = 0;
        for (double x : s) sum += std::exp(x - mx);
        lse[(static_cast<size_t>(b) * l.heads + h) * T + i] = mx + std::log(sum);
      }
  return lse;
}

// The q, k or v columns (part 0, 1, 2) of each row of a (rows, l.row()) tensor.
template <typename T>
std::vector<T> part_of(const std::vector<T>& qkv, size_t rows, const HeadLayout& l, int part) {
  const size_t begin_col = part == 0 ? 0 : part == 1 ? l.q_dim() : l.q_dim() + l.kv_dim();
  const size_t cols = part == 0 ? l.q_dim() : l.kv_dim(), ld = l.row();
  std::vector<T> out;
  out.reserve(rows * cols);
  for (size_t row = 0; row < rows; ++row) {
    const size_t begin = row * ld + begin_col;
    out.insert(out.end(), qkv.begin() + static_cast<long>(begin), qkv.begin() + static_cast<long>(begin + cols));
  }
  return out;
}
const char* const kParts[3] = {"dq", "dk", "dv"};

// The warp-specialised kernels' tiles; false where they cannot run (not a Hopper GPU or not an
// sm_90a build).
bool ws_tiles_if_supported(int hd, detail::AttentionTiles& tiles) {
  tiles = detail::warp_specialized_tiles(hd);
  return tiles.wgmma;
}

// Forward (and backward) of bf16 case c through `tiles`, or through the public functions when tiles
// is null; checks the forward's out and lse where `forward`, dq, dk and dv where `backward`. q and
// k in [-2, 2] (scores of std ~1.3: softmax neither flat nor one-hot); v, dout in [-1, 1].
void check_bf16(const OpRun& run, const Case& c, const detail::AttentionTiles* tiles, bool forward, bool backward,
                const std::string& prefix = "") {
  const HeadLayout& l = c.heads;
  const size_t rows = static_cast<size_t>(c.B) * c.T, ld = l.row();
  const size_t n_qkv = rows * ld, n_out = rows * l.q_dim(), n_lse = static_cast<size_t>(c.B) * l.heads * c.T;
  const uint64_t seed = 1000u + static_cast<uint64_t>(c.T) * 7 + static_cast<uint64_t>(l.head_dim) + (c.causal ? 1 : 0);
  std::vector<float> qkv(n_qkv);
  std::vector<bf16> qkv_h(n_qkv);
  fill_uniform(qkv, qkv_h, seed, 0, 2.0f);
  for (size_t row = 0; row < rows; ++row)  // v columns: rescale to [-1, 1]
    for (size_t col = l.q_dim() + l.kv_dim(); col < ld; ++col) {
      const size_t i = row * ld + col;
      qkv_h[i] = __float2bfloat16(qkv[i] * 0.5f);  // exact: halving a bf16
      qkv[i] = __bfloat162float(qkv_h[i]);
    }

  Stream stream;
  DeviceBuffer qkv_d(n_qkv * sizeof(bf16)), out_d(n_out * sizeof(bf16)), lse_d(n_lse * sizeof(float));
  PYLON_CUDA_CHECK(cudaMemcpy(qkv_d.get(), qkv_h.data(), n_qkv * sizeof(bf16), cudaMemcpyHostToDevice));
  // Poison on the kernels' stream: it is non-blocking, so a cudaMemset (legacy stream) is not ordered with it.
  PYLON_CUDA_CHECK(cudaMemsetAsync(out_d.get(), 0xFF, out_d.bytes(), stream.get()));  // NaN in bf16 and fp32
  PYLON_CUDA_CHECK(cudaMemsetAsync(lse_d.get(), 0xFF, lse_d.bytes(), stream.get()));
  if (tiles)
    detail::attention_forward_tiled(*tiles, out_d.as<bf16>(), lse_d.as<float>(), qkv_d.as<bf16>(), c.B, c.T, l,
                                    c.causal, stream.get());
  else
    cuda::attention_forward(out_d.as<bf16>(), lse_d.as<float>(), qkv_d.as<bf16>(), c.B, c.T, l, c.causal,
                            stream.get());
  stream.synchronize();

  std::vector<float> out_ref(n_out), probs(static_cast<size_t>(c.B) * l.heads * c.T * c.T);
  cpu::attention_forward(out_ref.data(), probs.data(), qkv.data(), c.B, c.T, l, c.causal);
  if (forward) {
    run.expect_close(prefix + "out", download<bf16>(out_d, n_out), out_ref, DType::bf16,
                     Tolerance{.rtol = kRtolBf16, .atol = kAtolOut});
    run.expect_close(prefix + "lse", download<float>(lse_d, n_lse), reference_lse(qkv, c.B, c.T, l, c.causal),
                     DType::f32, Tolerance{.rtol = kRtolLse, .atol = kAtolLse});
  }
  if (!backward) return;

  std::vector<float> dout(n_out);
  std::vector<bf16> dout_h(n_out);
  fill_uniform(dout, dout_h, seed, 1, 1.0f);
  DeviceBuffer dout_d(n_out * sizeof(bf16)), dqkv_d(n_qkv * sizeof(bf16));
  const size_t ws_bytes = attention_backward_workspace_bytes(c.B, c.T, l);
  DeviceBuffer ws_d(ws_bytes);
  PYLON_CUDA_CHECK(cudaMemcpy(dout_d.get(), dout_h.data(), n_out * sizeof(bf16), cudaMemcpyHostToDevice));
  PYLON_CUDA_CHECK(cudaMemsetAsync(dqkv_d.get(), 0xFF, dqkv_d.bytes(), stream.get()));
  PYLON_CUDA_CHECK(cudaMemsetAsync(ws_d.get(), 0xFF, ws_d.bytes(), stream.get()));
  if (tiles)
    detail::attention_backward_tiled(*tiles, dqkv_d.as<bf16>(), dout_d.as<bf16>(), qkv_d.as<bf16>(), out_d.as<bf16>(),
                                     lse_d.as<float>(), c.B, c.T, l, c.causal, ws_d.get(), ws_bytes, stream.get());
  else
    cuda::attention_backward(dqkv_d.as<bf16>(), dout_d.as<bf16>(), qkv_d.as<bf16>(), out_d.as<bf16>(),
                             lse_d.as<float>(), c.B, c.T, l, c.causal, ws_d.get(), ws_bytes, stream.get());
  stream.synchronize();

  std::vector<float> dqkv_ref(n_qkv);
  cpu::attention_backward(dqkv_ref.data(), dout.data(), qkv.data(), probs.data(), c.B, c.T, l);
  const std::vector<float> dqkv = download<bf16>(dqkv_d, n_qkv);
  for (int part = 0; part < 3; ++part) {  // q, k and v columns each with its own atol
    const std::vector<float> ref = part_of(dqkv_ref, rows, l, part);
    run.expect_close(prefix + kParts[part], part_of(dqkv, rows, l, part), ref, DType::bf16,
                     Tolerance{.rtol = kRtolBf16, .atol = kAtolGradFloor + kAtolGradOfMax * max_abs(ref)});
  }
}

// fp32 (attention_fp32.h) forward and backward on the default stream against the fp64 reference;
// q and k in [−2, 2], v and dout in [−1, 1].
void check_f32(const OpRun& run, const Case& c, bool forward, bool backward) {
  const HeadLayout& l = c.heads;
  const size_t rows = static_cast<size_t>(c.B) * c.T, ld = l.row();
  const size_t n_qkv = rows * ld, n_out = rows * l.q_dim(), n_lse = static_cast<size_t>(c.B) * l.heads * c.T;
  const uint64_t seed = 2000u + static_cast<uint64_t>(c.T) * 7 + static_cast<uint64_t>(l.head_dim) + (c.causal ? 1 : 0);
  std::vector<float> qkv = uniform(n_qkv, seed, 0, 2.f);
  for (size_t row = 0; row < rows; ++row)
    for (size_t col = l.q_dim() + l.kv_dim(); col < ld; ++col) qkv[row * ld + col] *= 0.5f;
  const std::vector<float> dout = uniform(n_out, seed, 1, 1.f);

  DeviceArray<float> d_qkv(qkv), d_out(n_out), d_lse(n_lse), d_dout(dout), d_dqkv(n_qkv);
  DeviceArray<char> ws(attention_backward_workspace_bytes(c.B, c.T, l));
  d_out.poison(), d_lse.poison(), d_dqkv.poison(), ws.poison();
  cuda::attention_forward(d_out.get(), d_lse.get(), d_qkv.get(), c.B, c.T, l, c.causal, nullptr);
  if (backward)
    cuda::attention_backward(d_dqkv.get(), d_dout.get(), d_qkv.get(), d_out.get(), d_lse.get(), c.B, c.T, l,
                             c.causal, ws.get(), ws.size(), nullptr);

  const std::vector<double> qkv_d(qkv.begin(), qkv.end()), dout_d(dout.begin(), dout.end());
  std::vector<double> out(n_out), probs(static_cast<size_t>(c.B) * l.heads * c.T * c.T), dqkv(n_qkv);
  cpu::attention_forward(out.data(), probs.data(), qkv_d.data(), c.B, c.T, l, c.causal);
  if (forward) {
    run.expect_close("out", d_out.download(), out, DType::f32, Tolerance{.rtol = kF32Rtol, .atol = kF32AtolOut});
    run.expect_close("lse", d_lse.download(), reference_lse(qkv_d, c.B, c.T, l, c.causal), DType::f32,
                     Tolerance{.rtol = kF32Rtol, .atol = kF32AtolLse});
  }
  if (!backward) return;
  cpu::attention_backward(dqkv.data(), dout_d.data(), qkv_d.data(), probs.data(), c.B, c.T, l);
  const std::vector<float> got = d_dqkv.download();
  for (int part = 0; part < 3; ++part) {  // q, k and v columns each with its own atol
    const std::vector<double> ref = part_of(dqkv, rows, l, part);
    run.expect_close(kParts[part], part_of(got, rows, l, part), ref, DType::f32,
                     Tolerance{.rtol = kF32Rtol, .atol = kF32AtolGradFloor + kF32AtolGradOfMax * max_abs(ref)});
  }
}

OpCase attention_case(bool forward, DType d, int B, int T, HeadLayout heads, bool causal, AttentionKernels k) {
  const std::string variant = std::string(causal ? "causal" : "full") + " " + kernels_name(k);
  return cuda_case(forward ? "attention_forward" : "attention_backward", d, attention_shape(B, T, heads), variant,
                   [=](const OpRun& run) {
    const Case c{B, T, heads, causal, k};
    if (d == DType::f32) return check_f32(run, c, forward, !forward);
    detail::AttentionTiles tiles;  // mma: the default shapes with wgmma off
    tiles.wgmma = false;
    if (k == AttentionKernels::ws && !ws_tiles_if_supported(heads.head_dim, tiles))
      GTEST_SKIP() << "the warp-specialised kernels need a Hopper GPU and an sm_90a build";
    check_bf16(run, c, k == AttentionKernels::default_path ? nullptr : &tiles, forward, !forward);
  });
}

std::string tiles_name(const detail::AttentionTiles& t) {
  std::string s = std::string(t.wgmma ? "wgmma" : "mma") + " fwd " + std::to_string(t.fwd_warps) + "/" +
                  std::to_string(t.fwd_block_n) + " dkdv " + std::to_string(t.dkdv_warps) + "/" +
                  std::to_string(t.dkdv_block_m) + " dq " + std::to_string(t.dq_warps) + "/" +
                  std::to_string(t.dq_block_n);
  if (t.fwd_ws) s += " ws stages " + std::to_string(t.fwd_stages);
  if (t.bwd_ws) s += " ws dkdv stages " + std::to_string(t.bwd_stages) + (t.bwd_pingpong ? " ping-pong" : "");
  if (t.dq_ws) s += " ws dq";
  return s;
}

}  // namespace

OpCase attention_forward(DType d, int B, int T, HeadLayout heads, bool causal, AttentionKernels k) {
  return attention_case(true, d, B, T, heads, causal, k);
}

// The forward runs first on the same kernels (its outputs feed the backward; its own rows check it).
OpCase attention_backward(DType d, int B, int T, HeadLayout heads, bool causal, AttentionKernels k) {
  return attention_case(false, d, B, T, heads, causal, k);
}

// Every compiled tile shape of the head dim (the benchmark's sweep may promote any of them to the
// default), forward and backward, at a length that leaves partial tiles of 32, 64 and 128; each
// output named by its tiles.
OpCase attention_every_compiled_tile(HeadLayout heads, bool causal) {
  return cuda_case("attention_forward_backward", DType::bf16, attention_shape(1, 200, heads),
                   std::string(causal ? "causal" : "full") + " every compiled tile", [=](const OpRun& run) {
    const std::vector<detail::AttentionTiles> all = detail::compiled_attention_tiles(heads.head_dim);
    EXPECT_FALSE(all.empty()) << "no compiled tiles at hd " << heads.head_dim;
    for (const detail::AttentionTiles& tiles : all)
      check_bf16(run, Case{1, 200, heads, causal, AttentionKernels::default_path}, &tiles, true, true,
                 tiles_name(tiles) + ": ");
  });
}

// The seed preset's shape with more thread blocks than the GPU holds at once: the default path
// must give bit-identical dqkv on a second run and agree with the mma.sync path (and so must the
// warp-specialised dk/dv pass at each stage count, where it runs). Each path is within
// (kAtolGradOfMax·max, kRtolBf16) of the exact result (the small rows check that against the CPU),
// so two paths are within twice that of each other. (Written for a one-pass backward whose dq
// sums wait on other blocks, bench/attention_notes.md; it holds any backward to both.) With
// kv_heads < 16 each dk/dv block also sums its group's query heads, which must be bit-identical too.
OpCase attention_backward_large_grid(bool causal, int kv_heads) {
  const HeadLayout heads{16, kv_heads, 128};
  return cuda_case("attention_backward", DType::bf16, attention_shape(4, 1024, heads),
                   std::string(causal ? "causal" : "full") + " default against mma", [=](const OpRun& run) {
    const int B = 4, T = 1024, hd = heads.head_dim;
    const size_t n_qkv = static_cast<size_t>(B) * T * heads.row(), n_out = static_cast<size_t>(B) * T * heads.q_dim();
    std::vector<float> qkv(n_qkv), dout(n_out);
    std::vector<bf16> qkv_h(n_qkv), dout_h(n_out);
    fill_uniform(qkv, qkv_h, 77, 0, 1.0f);
    fill_uniform(dout, dout_h, 77, 1, 1.0f);
    Stream stream;
    DeviceBuffer qkv_d(n_qkv * sizeof(bf16)), dout_d(n_out * sizeof(bf16)), out_d(n_out * sizeof(bf16));
    DeviceBuffer lse_d(static_cast<size_t>(B) * heads.heads * T * sizeof(float));
    const size_t ws_bytes = attention_backward_workspace_bytes(B, T, heads);
    DeviceBuffer ws_d(ws_bytes);
    PYLON_CUDA_CHECK(cudaMemcpy(qkv_d.get(), qkv_h.data(), n_qkv * sizeof(bf16), cudaMemcpyHostToDevice));
    PYLON_CUDA_CHECK(cudaMemcpy(dout_d.get(), dout_h.data(), n_out * sizeof(bf16), cudaMemcpyHostToDevice));
    cuda::attention_forward(out_d.as<bf16>(), lse_d.as<float>(), qkv_d.as<bf16>(), B, T, heads, causal, stream.get());
    auto backward = [&](const detail::AttentionTiles& tiles) {
      DeviceBuffer dqkv_d(n_qkv * sizeof(bf16));
      PYLON_CUDA_CHECK(cudaMemsetAsync(dqkv_d.get(), 0xFF, dqkv_d.bytes(), stream.get()));
      PYLON_CUDA_CHECK(cudaMemsetAsync(ws_d.get(), 0xFF, ws_d.bytes(), stream.get()));
      detail::attention_backward_tiled(tiles, dqkv_d.as<bf16>(), dout_d.as<bf16>(), qkv_d.as<bf16>(),
                                       out_d.as<bf16>(), lse_d.as<float>(), B, T, heads, causal, ws_d.get(),
                                       ws_bytes, stream.get());
      stream.synchronize();
      return download<bf16>(dqkv_d, n_qkv);
    };
    const detail::AttentionTiles tiles = detail::default_attention_tiles(hd);
    detail::AttentionTiles mma_tiles;
    mma_tiles.wgmma = false;
    const std::vector<float> first = backward(tiles), second = backward(tiles), mma = backward(mma_tiles);
    const Tolerance twice{.rtol = 2 * kRtolBf16, .atol = 2 * kAtolGradOfMax * max_abs(mma)};
    run.expect_bitwise("dqkv, second run", second, first);
    run.expect_close("dqkv against mma", first, mma, DType::bf16, twice);
    // The warp-specialised dk/dv pass, each stage count, its consumers drifting and in ping-pong: many
    // query tiles. The turns change when products are issued, not what a warpgroup computes: the two
    // orders agree bit for bit.
    detail::AttentionTiles ws_tiles;
    if (ws_tiles_if_supported(hd, ws_tiles))
      for (const int stages : {2, 3}) {
        std::vector<float> drifting;
        for (const bool pingpong : {false, true}) {
          ws_tiles.bwd_stages = stages;
          ws_tiles.bwd_pingpong = pingpong;
          const std::string name =
              "dqkv (ws dkdv stages " + std::to_string(stages) + (pingpong ? ", ping-pong)" : ")");
          const std::vector<float> ws1 = backward(ws_tiles), ws2 = backward(ws_tiles);
          run.expect_bitwise(name + ", second run", ws2, ws1);
          run.expect_close(name + " against mma", ws1, mma, DType::bf16, twice);
          if (pingpong) run.expect_bitwise(name + " against the drifting consumers", ws1, drifting);
          else drifting = ws1;
        }
      }
  });
}

// The warp-specialised forward against the wgmma forward on one input, every compiled ws shape:
// both within (kAtolOut, kRtolBf16) of the exact output (checked above), so within twice that of
// each other; lse likewise. T = 1000 leaves a partial tile of 104 (of 128) and 40 (of 64) keys;
// B·heads = 15 (5 query heads over kv_heads key/value heads).
OpCase attention_forward_ws_against_wgmma(int hd, bool causal, int kv_heads) {
  const HeadLayout heads{5, kv_heads, hd};
  return cuda_case("attention_forward", DType::bf16, attention_shape(3, 1000, heads),
                   std::string(causal ? "causal" : "full") + " every ws tile against wgmma", [=](const OpRun& run) {
    detail::AttentionTiles probe;
    if (!ws_tiles_if_supported(128, probe)) GTEST_SKIP() << "the warp-specialised forward needs Hopper and sm_90a";
    const int B = 3, T = 1000;
    const size_t n_qkv = static_cast<size_t>(B) * T * heads.row(), n_out = static_cast<size_t>(B) * T * heads.q_dim();
    const size_t n_lse = static_cast<size_t>(B) * heads.heads * T;
    std::vector<float> qkv(n_qkv);
    std::vector<bf16> qkv_h(n_qkv);
    fill_uniform(qkv, qkv_h, 4242 + hd, 0, 2.0f);
    Stream stream;
    DeviceBuffer qkv_d(n_qkv * sizeof(bf16)), out_d(n_out * sizeof(bf16)), lse_d(n_lse * sizeof(float));
    PYLON_CUDA_CHECK(cudaMemcpy(qkv_d.get(), qkv_h.data(), n_qkv * sizeof(bf16), cudaMemcpyHostToDevice));
    auto forward = [&](const detail::AttentionTiles& tiles) {
      PYLON_CUDA_CHECK(cudaMemsetAsync(out_d.get(), 0xFF, out_d.bytes(), stream.get()));  // NaN
      PYLON_CUDA_CHECK(cudaMemsetAsync(lse_d.get(), 0xFF, lse_d.bytes(), stream.get()));
      detail::attention_forward_tiled(tiles, out_d.as<bf16>(), lse_d.as<float>(), qkv_d.as<bf16>(), B, T, heads,
                                      causal, stream.get());
      stream.synchronize();
      return std::make_pair(download<bf16>(out_d, n_out), download<float>(lse_d, n_lse));
    };
    detail::AttentionTiles wgmma_tiles;  // today's default forward (4 warps, 64 keys), whatever the environment
    wgmma_tiles.wgmma = true;
    const auto [out_ref, lse_ref] = forward(wgmma_tiles);
    for (const detail::AttentionTiles& tiles : detail::compiled_attention_tiles(hd)) {
      if (!tiles.fwd_ws) continue;
      const std::string name = "ws block_n " + std::to_string(tiles.fwd_block_n) + " stages " +
                               std::to_string(tiles.fwd_stages) + ": ";
      const auto [out, lse] = forward(tiles);
      run.expect_close(name + "out against wgmma", out, out_ref, DType::bf16,
                       Tolerance{.rtol = 2 * kRtolBf16, .atol = 2 * kAtolOut});
      run.expect_close(name + "lse against wgmma", lse, lse_ref, DType::f32,
                       Tolerance{.rtol = 2 * kRtolLse, .atol = 2 * kAtolLse});
    }
  });
}

}  // namespace pylon::cuda::testing

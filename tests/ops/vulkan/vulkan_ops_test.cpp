// Every Vulkan shader against its CPU reference, element by element, at odd sizes: both GEMVs
// and the tiled GEMM over f32 / f16 / int8 / int4 weights (with bias, residual accumulate and
// weights split into several buffers), embedding, RMSNorm, SiLU, RoPE and attention.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <deque>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/half.h"
#include "ops/cpu/ops.h"
#include "ops/cpu/quantized.h"
#include "ops/vulkan/ops.h"
#include "ops/vulkan/weights.h"
#include "support/vulkan_test_util.h"

namespace pylon {
namespace {

std::vector<float> random_floats(size_t n, uint32_t seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

template <typename T>
std::vector<std::byte> bytes_of(const std::vector<T>& v) {
  std::vector<std::byte> b(v.size() * sizeof(T));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// A device buffer holding `v` (floats or words), host-visible where possible.
template <typename T>
vk::Buffer device_vector(vk::Context& ctx, const std::vector<T>& v) {
  vk::Buffer b = ctx.make_buffer(std::max<size_t>(v.size() * sizeof(T), 16), vk::MemoryKind::device);
  ctx.upload(b, 0, v.data(), v.size() * sizeof(T));
  return b;
}

std::vector<float> read_floats(vk::Context& ctx, const vk::Buffer& b, size_t n) {
  std::vector<float> v(n);
  ctx.download(b, 0, v.data(), n * 4);
  return v;
}

// |out - ref| <= atol + rtol·|ref| (+ slack[i] where given).
void expect_close(const std::vector<float>& out, const std::vector<float>& ref, float atol, float rtol,
                  const std::string& what, const std::vector<float>& slack = {}) {
  ASSERT_EQ(out.size(), ref.size());
  int bad = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const float tol = atol + rtol * std::fabs(ref[i]) + (slack.empty() ? 0.f : slack[i]);
    const bool ok = std::isfinite(out[i]) && std::fabs(out[i] - ref[i]) <= tol;
    if (!ok && bad++ < 5) ADD_FAILURE() << what << " [" << i << "]: " << out[i] << " vs " << ref[i];
  }
  EXPECT_EQ(bad, 0) << what;
}

// An encoded weight plus its exact fp32 decoding (the CPU reference's weights).
struct TestWeight {
  std::vector<std::byte> values, scales;
  std::vector<float> dequantized;
  vk::HostTensor host(EdgeDType d, int64_t rows, int64_t cols, int group, bool scale_f16) const {
    vk::HostTensor h;
    h.dtype = d, h.rows = rows, h.cols = cols, h.group = group, h.scale_f16 = scale_f16;
    h.values = values.data();
    if (!scales.empty()) h.scales = scales.data(), h.scale_bytes = scales.size();
    return h;
  }
};

TestWeight encode(EdgeDType d, int64_t rows, int64_t cols, int group, bool scale_f16, uint32_t seed) {
  const std::vector<float> w = random_floats(static_cast<size_t>(rows * cols), seed);
  TestWeight t;
  t.dequantized.resize(w.size());
  if (d == EdgeDType::f32) {
    t.values = bytes_of(w);
    t.dequantized = w;
  } else if (d == EdgeDType::f16) {
    std::vector<uint16_t> h(w.size());
    for (size_t i = 0; i < w.size(); ++i) h[i] = float_to_half(w[i]), t.dequantized[i] = half_to_float(h[i]);
    t.values = bytes_of(h);
  } else if (d == EdgeDType::int8) {
    std::vector<int8_t> q(w.size());
    std::vector<float> s(static_cast<size_t>(rows));
    quantize_int8_rows(w.data(), rows, cols, q.data(), s.data());
    dequantize_int8_rows(q.data(), s.data(), rows, cols, t.dequantized.data());
    t.values = bytes_of(q), t.scales = bytes_of(s);
  } else {
    std::vector<uint8_t> q(static_cast<size_t>(rows * int4_row_bytes(cols)));
    std::vector<float> s(static_cast<size_t>(rows * int4_groups(cols, group)));
    quantize_int4_groups(w.data(), rows, cols, group, scale_f16, q.data(), s.data());
    dequantize_int4_groups(q.data(), s.data(), rows, cols, group, t.dequantized.data());
    t.values = bytes_of(q);
    if (scale_f16) {
      std::vector<uint16_t> h(s.size());
      for (size_t i = 0; i < s.size(); ++i) h[i] = float_to_half(s[i]);
      t.scales = bytes_of(h);
    } else {
      t.scales = bytes_of(s);
    }
  }
  return t;
}

struct MatmulCase {
  EdgeDType dtype;
  int64_t rows, cols;
  uint32_t n;
  int group = 32;
  bool scale_f16 = true;
};

// y = x·Wᵀ (+ bias, + y0 when accumulating) in fp32 on the CPU from the decoded weights, against
// the device. Weights decode exactly on both sides, so the results differ only by fp32
// summation order (and, for int8, by the row scale applied once after the sum):
// |out - ref| <= 1e-4 + 1e-4·|ref| for |x|, |w| <= 1 and up to a few hundred columns, plus
// 2^-20·Σ|x·w| for the summation order of long rows (thousands of columns). The coopmat
// GEMM (where the device runs it) rounds x to fp16 first: each product then errs by up to 2^-11 of
// itself, so its bound adds 2^-11·Σ|x·w| per output.
// x_off: where x starts in its buffer (a row offset, as the head uses for the last token); the
// GEMV reads x as vec4 when it is a multiple of 4, else element by element.
// silu: the fused activation, y [+]= silu(x·Wᵀ + bias), against cpu::silu_forward (|silu'| < 1.1).
void check_matmul(vk::Context& ctx, const MatmulCase& c, bool with_bias, bool accumulate, uint32_t x_off = 3,
                  bool silu = false) {
  vk::Ops ops(ctx);
  // int8 / int4 on gemm_coopmat2 (where it runs) from 16 tokens: decoded to fp16 first.
  ops.set_coopmat2_dequant({16, vk::Ops::Coopmat2Dequant{}.piece_bytes});
  std::deque<vk::Buffer> keep;
  const TestWeight tw = encode(c.dtype, c.rows, c.cols, c.group, c.scale_f16, 7);
  const vk::DeviceMatrix w = vk::upload_tensor(ctx, tw.host(c.dtype, c.rows, c.cols, c.group, c.scale_f16), keep);
  const TestWeight tb = encode(EdgeDType::f16, 1, c.rows, 0, false, 8);
  const vk::DeviceMatrix b = vk::upload_tensor(ctx, tb.host(EdgeDType::f16, 1, c.rows, 0, false), keep);
  const std::vector<float> x = random_floats(x_off + c.n * c.cols, 9);
  const std::vector<float> y0 = random_floats(c.n * c.rows, 10);
  std::vector<float> ref(y0.size()), slack(y0.size(), 0.f);
  const bool coopmat = ops.uses_coopmat(c.n);
  for (uint32_t i = 0; i < c.n; ++i)
    for (int64_t r = 0; r < c.rows; ++r) {
      float acc = 0, magnitude = 0;
      for (int64_t k = 0; k < c.cols; ++k) {
        const float p = x[x_off + i * c.cols + k] * tw.dequantized[r * c.cols + k];
        acc += p, magnitude += std::fabs(p);
      }
      slack[i * c.rows + r] = (coopmat ? magnitude / 2048.f : 0.f) + magnitude / 1048576.f;
      if (with_bias) acc += tb.dequantized[r];
      if (silu) cpu::silu_forward(&acc, &acc, 1);
      ref[i * c.rows + r] = accumulate ? y0[i * c.rows + r] + acc : acc;
    }
  // One token: both GEMVs: a subgroup per row set in three shapes and the automatic one
  // (gemv_subgroup: rows per subgroup x subgroups per set; 3 rows leave a partial set at most
  // sizes), an invocation per row
  // through storage buffers and, where the device offers them, texel buffers. Several tokens: the
  // GEMM and, with texel buffers, gemm_rows_texel (4 tokens an invocation).
  struct Variant {
    bool rows, texel;
    vk::Ops::GemvShape shape;
  };
  for (const Variant& v : {Variant{false, false, {1, 1}}, Variant{false, false, {3, 1}},
                           Variant{false, false, {2, 4}}, Variant{false, false, {}},
                           Variant{true, false, {}}, Variant{true, true, {}}}) {
    // Several tokens: the GEMM (tiled, or coopmat where it runs) and, with texels, gemm_rows_texel.
    if (c.n != 1 && !v.texel && (v.rows || v.shape.rows != 1 || v.shape.split != 1)) continue;
    if (v.texel && !ctx.info().texel_reads) break;
    ops.set_gemv_rows(v.rows);
    ops.set_gemv_texel(v.texel);
    ops.set_gemv_shape(v.shape);
    vk::Buffer xb = device_vector(ctx, x), yb = device_vector(ctx, y0);
    vk::Recorder rec(ctx);
    ops.matmul(rec, {&yb}, static_cast<uint32_t>(c.rows), {&xb}, x_off, c.n, w, with_bias ? &b : nullptr,
               accumulate, silu);
    rec.run();
    const std::string gemv = v.texel ? " gemv_rows_texel"
                             : v.rows ? " gemv_rows"
                                      : " gemv_subgroup " + std::to_string(v.shape.rows) + "x" +
                                            std::to_string(v.shape.split);
    expect_close(read_floats(ctx, yb, y0.size()), ref, 1e-4f, 1e-4f,
                 std::string(edge_dtype_name(c.dtype)) + " rows " + std::to_string(c.rows) + " cols " +
                     std::to_string(c.cols) + " n " + std::to_string(c.n) + " chunks " +
                     std::to_string(w.chunks.size()) + " x_off " + std::to_string(x_off) +
                     (silu ? " silu" : "") + (coopmat ? " coopmat" : "") + (c.n == 1 ? gemv : v.texel ? " texel" : ""),
                 slack);
  }
}

const MatmulCase kCases[] = {
    {EdgeDType::f32, 37, 71, 1},   {EdgeDType::f32, 37, 71, 5},   {EdgeDType::f32, 65, 128, 1},
    {EdgeDType::f16, 37, 71, 1},   {EdgeDType::f16, 130, 256, 1}, {EdgeDType::f16, 130, 256, 67},
    {EdgeDType::int8, 37, 71, 1},  {EdgeDType::int8, 70, 96, 1},  {EdgeDType::int8, 70, 96, 3},
    {EdgeDType::int8, 135, 160, 20},  // past one 128-row coopmat tile, the epilogue on int8 words
    {EdgeDType::int4, 37, 71, 1},  {EdgeDType::int4, 70, 96, 1},  {EdgeDType::int4, 70, 96, 66},
    {EdgeDType::int4, 33, 128, 1, 64, false}, {EdgeDType::int4, 33, 128, 9, 64, false},
    // GEMV rows of many 16-byte words (the four-words-in-flight loop and its remainder).
    {EdgeDType::f32, 9, 1028, 1},  {EdgeDType::f16, 19, 4104, 1}, {EdgeDType::int8, 23, 2064, 1},
    {EdgeDType::int4, 21, 4160, 1}, {EdgeDType::int4, 6, 4224, 1, 64, false},
    {EdgeDType::int4, 7, 576, 1, 96, true},  // 3 words a group: a division, not a shift
    // gemm_coopmat2 (where it runs) with K split over 2 workgroups a tile: few tiles, long rows.
    {EdgeDType::f16, 70, 1024, 24}, {EdgeDType::int4, 64, 1024, 20, 32, true},
};

TEST(VulkanOps, MatmulEveryDtypeAgainstTheCpu) {
  PYLON_VULKAN_CONTEXT_OR_SKIP(ctx);
  for (const MatmulCase& c : kCases) {
    check_matmul(*ctx, c, false, false, 3);
    check_matmul(*ctx, c, true, true, 4);
    check_matmul(*ctx, c, true, false, 0, true);
  }
}

// The decode head's GEMV (decode_layer.comp's HEAD pipeline) against the CPU, with check_matmul's
// bound, at rows of whole 16-byte words only (what it takes): rows of one step of words a lane or
// several (the last partial: f16 2056 columns are 257 words), row sets that leave the last partial
// (3 rows a set, 37 rows), one row, and grids from one and three workgroups (so subgroups with
// several, one or no row sets).
TEST(VulkanOps, DecodeHeadAgainstTheCpu) {
  PYLON_VULKAN_CONTEXT_OR_SKIP(ctx);
  const MatmulCase cases[] = {
      {EdgeDType::f32, 37, 36, 1},    {EdgeDType::f32, 9, 1028, 1},   {EdgeDType::f16, 37, 72, 1},
      {EdgeDType::f16, 19, 2056, 1},  {EdgeDType::f16, 1, 256, 1},    {EdgeDType::int8, 70, 96, 1},
      {EdgeDType::int8, 23, 2064, 1}, {EdgeDType::int4, 33, 128, 1, 64, false},
      {EdgeDType::int4, 21, 2080, 1}, {EdgeDType::int4, 7, 576, 1, 96, true},
  };
  vk::Ops ops(*ctx);
  for (const MatmulCase& c : cases) {
    std::deque<vk::Buffer> keep;
    const TestWeight tw = encode(c.dtype, c.rows, c.cols, c.group, c.scale_f16, 7);
    const vk::DeviceMatrix w = vk::upload_tensor(*ctx, tw.host(c.dtype, c.rows, c.cols, c.group, c.scale_f16), keep);
    ASSERT_EQ(ops.decode_head_unsupported(w), "");
    const std::vector<float> x = random_floats(c.cols, 9);
    std::vector<float> ref(c.rows), slack(c.rows);
    for (int64_t r = 0; r < c.rows; ++r) {
      float acc = 0, magnitude = 0;
      for (int64_t k = 0; k < c.cols; ++k) {
        const float p = x[k] * tw.dequantized[r * c.cols + k];
        acc += p, magnitude += std::fabs(p);
      }
      ref[r] = acc, slack[r] = magnitude / 1048576.f;
    }
    for (const uint32_t rows : {0u, 3u})  // rows a subgroup (0: the dtype's; 3 at 37 rows)
      for (const uint32_t groups : {1u, 3u}) {
        if (rows == 3 && c.rows != 37) continue;
        ops.set_gemv_shape({rows, 1});
        vk::Buffer xb = device_vector(*ctx, x), yb = device_vector(*ctx, std::vector<float>(c.rows, 7.f));
        vk::Recorder rec(*ctx);
        ops.decode_head(rec, {&yb}, {&xb}, w, {groups, 256});
        rec.run();
        expect_close(read_floats(*ctx, yb, c.rows), ref, 1e-4f, 1e-4f,
                     std::string("decode_head ") + edge_dtype_name(c.dtype) + " rows " + std::to_string(c.rows) +
                         " cols " + std::to_string(c.cols) + " rows a set " + std::to_string(rows) + " grid " +
                         std::to_string(groups),
                     slack);
      }
  }
}

// The GEMV with RMSNorm fused in front (decode): y [+]= act((rmsnorm(x)·g)·Wᵀ + bias) against
// cpu::rmsnorm_forward then the fp32 dot, norm weights g in f16 and f32, at odd and long rows and
// both x layouts; the bound is check_matmul's (the normalised x is about 1 in size too).
TEST(VulkanOps, GemvWithFusedRmsnorm) {
  PYLON_VULKAN_CONTEXT_OR_SKIP(ctx);
  vk::Ops ops(*ctx);
  struct Case {
    MatmulCase m;
    EdgeDType norm;
    uint32_t x_off;
    bool silu, accumulate;
  };
  for (const Case& t : {Case{{EdgeDType::f16, 37, 71, 1}, EdgeDType::f16, 3, false, false},
                        Case{{EdgeDType::f16, 19, 4104, 1}, EdgeDType::f32, 0, true, false},
                        Case{{EdgeDType::int8, 23, 2064, 1}, EdgeDType::f16, 4, false, true},
                        Case{{EdgeDType::int4, 21, 4160, 1}, EdgeDType::f16, 0, true, true},
                        Case{{EdgeDType::int4, 33, 128, 1, 64, false}, EdgeDType::f32, 3, false, false},
                        Case{{EdgeDType::f32, 9, 1028, 1}, EdgeDType::f32, 5, false, false}}) {
    const MatmulCase& c = t.m;
    std::deque<vk::Buffer> keep;
    const TestWeight tw = encode(c.dtype, c.rows, c.cols, c.group, c.scale_f16, 41);
    const vk::DeviceMatrix w = vk::upload_tensor(*ctx, tw.host(c.dtype, c.rows, c.cols, c.group, c.scale_f16), keep);
    const TestWeight tg = encode(t.norm, 1, c.cols, 0, false, 42);
    const vk::DeviceMatrix g = vk::upload_tensor(*ctx, tg.host(t.norm, 1, c.cols, 0, false), keep);
    const TestWeight tb = encode(EdgeDType::f16, 1, c.rows, 0, false, 43);
    const vk::DeviceMatrix b = vk::upload_tensor(*ctx, tb.host(EdgeDType::f16, 1, c.rows, 0, false), keep);
    const std::vector<float> x = random_floats(t.x_off + c.cols, 44, -2.f, 2.f), y0 = random_floats(c.rows, 45);
    std::vector<float> h(c.cols), rstd(1), ref(c.rows), slack(c.rows);
    cpu::rmsnorm_forward(h.data(), rstd.data(), x.data() + t.x_off, tg.dequantized.data(), 1,
                         static_cast<int>(c.cols), 1e-5f);
    for (int64_t r = 0; r < c.rows; ++r) {
      float acc = 0, magnitude = 0;
      for (int64_t k = 0; k < c.cols; ++k) {
        const float p = h[k] * tw.dequantized[r * c.cols + k];
        acc += p, magnitude += std::fabs(p);
      }
      acc += tb.dequantized[r];
      if (t.silu) cpu::silu_forward(&acc, &acc, 1);
      ref[r] = t.accumulate ? y0[r] + acc : acc;
      slack[r] = magnitude / 1048576.f;
    }
    for (const vk::Ops::GemvShape shape :
         {vk::Ops::GemvShape{1, 1}, vk::Ops::GemvShape{3, 2}, vk::Ops::GemvShape{}}) {
      const bool rows = shape.rows == 0;  // last: the row-per-invocation GEMV
      ops.set_gemv_rows(rows);
      ops.set_gemv_shape(shape);
      vk::Buffer xb = device_vector(*ctx, x), yb = device_vector(*ctx, y0);
      vk::Recorder rec(*ctx);
      ops.normed_gemv(rec, {&yb}, static_cast<uint32_t>(c.rows), {&xb}, t.x_off, g, 1e-5f, w, &b, t.accumulate,
                      t.silu);
      rec.run();
      expect_close(read_floats(*ctx, yb, ref.size()), ref, 1e-4f, 1e-4f,
                   std::string("normed gemv ") + edge_dtype_name(c.dtype) + " cols " + std::to_string(c.cols) +
                       " norm " + edge_dtype_name(t.norm) + " x_off " + std::to_string(t.x_off) +
                       (rows ? " gemv_rows" : " gemv_subgroup " + std::to_string(shape.rows) + "x" +
                                                  std::to_string(shape.split)),
                   slack);
    }
  }
}

TEST(VulkanOps, MatmulOverWeightsSplitIntoSeveralBuffers) {
  vk::ContextOptions o;
  o.max_buffer_bytes = 300 * 96;  // 256 rows of int8 x 96 per chunk
  PYLON_VULKAN_CONTEXT_OR_SKIP(ctx, o);
  // Several tokens too: the GEMMs' chunks (coopmat and coopmat2 where they run, with row_base).
  for (const MatmulCase& c : {MatmulCase{EdgeDType::int8, 600, 96, 1}, MatmulCase{EdgeDType::int8, 600, 96, 4},
                              MatmulCase{EdgeDType::f16, 700, 40, 1}, MatmulCase{EdgeDType::int4, 600, 64, 2},
                              MatmulCase{EdgeDType::f16, 700, 32, 40}, MatmulCase{EdgeDType::int8, 600, 96, 20}})
    check_matmul(*ctx, c, true, false);
}

TEST(VulkanOps, EmbeddingRmsnormSilu) {
  PYLON_VULKAN_CONTEXT_OR_SKIP(ctx);
  vk::Ops ops(*ctx);
  std::deque<vk::Buffer> keep;
  const int V = 50, D = 77, n = 5;
  const TestWeight e = encode(EdgeDType::f16, V, D, 0, false, 1);
  const vk::DeviceMatrix em = vk::upload_tensor(*ctx, e.host(EdgeDType::f16, V, D, 0, false), keep);
  const std::vector<uint32_t> toks = {3, 49, 0, 3, 17};
  const TestWeight nw = encode(EdgeDType::f16, 1, D, 0, false, 2);
  const vk::DeviceMatrix nm = vk::upload_tensor(*ctx, nw.host(EdgeDType::f16, 1, D, 0, false), keep);
  vk::Buffer tb = device_vector(*ctx, toks), xb = device_vector(*ctx, random_floats(n * D, 3)),
             yb = device_vector(*ctx, random_floats(n * D, 4));
  vk::Recorder rec(*ctx);
  ops.embedding(rec, {&xb}, {&tb}, n, em);
  ops.rmsnorm(rec, {&yb}, {&xb}, nm, n, 1e-5f);
  rec.run();
  std::vector<float> x(n * D), y(n * D), rstd(n);
  for (int i = 0; i < n; ++i)
    for (int c = 0; c < D; ++c) x[i * D + c] = e.dequantized[toks[i] * D + c];
  expect_close(read_floats(*ctx, xb, x.size()), x, 0, 0, "embedding (exact)");
  cpu::rmsnorm_forward(y.data(), rstd.data(), x.data(), nw.dequantized.data(), n, D, 1e-5f);
  expect_close(read_floats(*ctx, yb, y.size()), y, 1e-6f, 1e-5f, "rmsnorm");
  // Rows of a multiple of 4 (read as vec4s), fewer and more columns than the workgroup's 256
  // invocations, norm weights in f16 and f32.
  for (const int cols : {12, 1028})
    for (const EdgeDType dt : {EdgeDType::f16, EdgeDType::f32}) {
      const TestWeight g = encode(dt, 1, cols, 0, false, 6);
      const vk::DeviceMatrix gm = vk::upload_tensor(*ctx, g.host(dt, 1, cols, 0, false), keep);
      const std::vector<float> x4 = random_floats(3 * cols, 7);
      vk::Buffer x4b = device_vector(*ctx, x4), y4b = device_vector(*ctx, random_floats(3 * cols, 8));
      ops.rmsnorm(rec, {&y4b}, {&x4b}, gm, 3, 1e-5f);
      rec.run();
      std::vector<float> y4(x4.size()), rstd4(3);
      cpu::rmsnorm_forward(y4.data(), rstd4.data(), x4.data(), g.dequantized.data(), 3, cols, 1e-5f);
      expect_close(read_floats(*ctx, y4b, y4.size()), y4, 1e-6f, 1e-5f,
                   "rmsnorm, " + std::to_string(cols) + " columns, " + edge_dtype_name(dt) + " weights");
    }

  const std::vector<float> s = random_floats(1001, 5, -8.f, 8.f);
  std::vector<float> sref(s.size());
  cpu::silu_forward(sref.data(), s.data(), static_cast<int64_t>(s.size()));
  vk::Buffer sb = device_vector(*ctx, s);
  ops.silu(rec, {&sb}, 1001);
  rec.run();
  expect_close(read_floats(*ctx, sb, s.size()), sref, 1e-6f, 1e-5f, "silu");  // GPU exp: a few ulp
}

// Attention on the CPU (the loop of model/decoder.cpp, the specification): queries rows of q with
// stride a.q_stride, keys/values as a says, the first query at position pos0.
std::vector<float> attention_reference(const std::vector<float>& q, const std::vector<float>& K,
                                       const std::vector<float>& Vv, const vk::Ops::AttentionArgs& a, int pos0) {
  const int n = static_cast<int>(a.n), H = static_cast<int>(a.heads), hd = static_cast<int>(a.hd);
  std::vector<float> out(static_cast<size_t>(n) * a.o_stride);
  for (int i = 0; i < n; ++i)
    for (int h = 0; h < H; ++h) {
      const int keys = a.causal ? pos0 + i + 1 : static_cast<int>(a.keys);
      std::vector<float> s(static_cast<size_t>(keys));
      float mx = -INFINITY, sum = 0;
      for (int j = 0; j < keys; ++j) {
        float d = 0;
        for (int c = 0; c < hd; ++c)
          d += q[a.q_off + i * a.q_stride + h * hd + c] * K[a.k_off + j * a.k_stride + h * hd + c];
        s[j] = d * a.scale, mx = std::max(mx, s[j]);
      }
      for (auto& e : s) sum += (e = std::exp(e - mx));
      for (int c = 0; c < hd; ++c) {
        float acc = 0;
        for (int j = 0; j < keys; ++j) acc += s[j] / sum * Vv[a.v_off + j * a.v_stride + h * hd + c];
        out[i * a.o_stride + h * hd + c] = acc;
      }
    }
  return out;
}

TEST(VulkanOps, RopeAndAttention) {
  PYLON_VULKAN_CONTEXT_OR_SKIP(ctx);
  vk::Ops ops(*ctx);
  const int n = 6, D = 48, H = 4, hd = D / H, half = hd / 2, pos0 = 7, T = 20;
  const float theta = 10000.f;
  std::vector<float> table(static_cast<size_t>(T) * half * 2);
  for (int t = 0; t < T; ++t)
    for (int i = 0; i < half; ++i) {
      const float a = float(t) * std::pow(theta, -float(2 * i) / float(hd));
      table[(t * half + i) * 2] = std::cos(a), table[(t * half + i) * 2 + 1] = std::sin(a);
    }
  std::vector<float> qkv = random_floats(n * 3 * D, 11), ref = qkv;
  cpu::rope_forward(ref.data(), 1, n, D, H, theta, pos0);
  // The position split between the push constant (2) and the device buffer (5), and the KV
  // append: rows pos0 .. pos0 + n - 1 of the caches get the rotated k and the v of each token.
  vk::Buffer qb = device_vector(*ctx, qkv), tb = device_vector(*ctx, table);
  vk::Buffer pb = device_vector(*ctx, std::vector<uint32_t>{5, 0, 0, 0});
  const std::vector<float> kc0 = random_floats(T * D, 15), vc0 = random_floats(T * D, 16);
  vk::Buffer kc0b = device_vector(*ctx, kc0), vc0b = device_vector(*ctx, vc0);
  vk::Recorder rec(*ctx);
  const vk::Ops::KvCache cache{{&kc0b}, {&vc0b}};
  ops.rope(rec, {&qb}, {&tb}, {&pb}, n, D, H, 2, &cache);
  rec.run();
  const std::vector<float> rotated = read_floats(*ctx, qb, qkv.size());
  expect_close(rotated, ref, 1e-6f, 1e-5f, "rope");
  std::vector<float> k_ref = kc0, v_ref = vc0;
  for (int i = 0; i < n; ++i)
    for (int c = 0; c < D; ++c) {
      k_ref[(pos0 + i) * D + c] = ref[i * 3 * D + D + c];
      v_ref[(pos0 + i) * D + c] = qkv[i * 3 * D + 2 * D + c];
    }
  expect_close(read_floats(*ctx, kc0b, k_ref.size()), k_ref, 1e-6f, 1e-5f, "rope: k appended");
  expect_close(read_floats(*ctx, vc0b, v_ref.size()), v_ref, 0.f, 0.f, "rope: v appended");

  // Causal over a cache of pos0 + n keys, and bidirectional over the packed rows themselves.
  const std::vector<float> kc = random_floats(T * D, 12), vc = random_floats(T * D, 13);
  vk::Buffer kb = device_vector(*ctx, kc), vb = device_vector(*ctx, vc);
  vk::Buffer sb = ctx->make_buffer(4ull * n * H * T, vk::MemoryKind::device);
  vk::Buffer ob = device_vector(*ctx, random_floats(n * D, 14));
  const float scale = 1.f / std::sqrt(float(hd));
  for (const bool tiled : {true, false})  // attention_tiled.comp, then attention.comp
  for (const bool causal : {true, false}) {
    ops.set_tiled_attention(tiled);
    vk::Ops::AttentionArgs a{};
    a.n = n, a.heads = H, a.hd = hd, a.pos0 = pos0 - 5, a.causal = causal, a.q_off = 0, a.q_stride = 3 * D;
    a.o_stride = D, a.max_keys = T, a.scale = scale;
    if (causal) a.keys = pos0 + n, a.k_off = 0, a.k_stride = D, a.v_off = 0, a.v_stride = D;
    else a.keys = n, a.k_off = D, a.k_stride = 3 * D, a.v_off = 2 * D, a.v_stride = 3 * D;
    if (causal) ops.attention(rec, {&qb}, {&kb}, {&vb}, {&sb}, {&ob}, {&pb}, a);  // position 2 + 5
    else ops.attention(rec, {&qb}, {&qb}, {&qb}, {&sb}, {&ob}, ops.zero_position(), a);
    rec.run();
    const std::vector<float> out = attention_reference(rotated, causal ? kc : rotated, causal ? vc : rotated, a, pos0);
    expect_close(read_floats(*ctx, ob, out.size()), out, 1e-5f, 1e-4f,
                 std::string(causal ? "attention causal" : "attention") + (tiled ? " tiled" : ""));
  }
}

// An attention case of the two tests below: n queries in packed qkv rows (n, 3D), H heads of hd;
// causal: keys and values from a cache of T rows at position pos0 (a.pos0 = 4, the rest from the
// device's position buffer), else the packed rows' k and v thirds.
vk::Ops::AttentionArgs attention_case(int n, int H, int hd, int T, int pos0, bool causal) {
  const int D = H * hd;
  vk::Ops::AttentionArgs a{};
  a.n = n, a.heads = H, a.hd = hd, a.pos0 = 4, a.causal = causal, a.q_off = 0, a.q_stride = 3 * D;
  a.o_stride = D, a.max_keys = T, a.scale = 1.f / std::sqrt(float(hd));
  if (causal) a.keys = pos0 + n, a.k_off = 0, a.k_stride = D, a.v_off = 0, a.v_stride = D;
  else a.keys = n, a.k_off = D, a.k_stride = 3 * D, a.v_off = 2 * D, a.v_stride = 3 * D;
  return a;
}

// ops.attention on case a (attention_case's, with these rows and cache) with `scratch` bytes of
// scratch, against the reference.
void check_attention(vk::Context& ctx, vk::Ops& ops, const vk::Ops::AttentionArgs& a, int pos0,
                     const std::vector<float>& qkv, const std::vector<float>& kc, const std::vector<float>& vc,
                     uint64_t scratch, float atol, float rtol, const std::string& what) {
  vk::Buffer qb = device_vector(ctx, qkv), kb = device_vector(ctx, kc), vb = device_vector(ctx, vc);
  vk::Buffer sb = ctx.make_buffer(scratch, vk::MemoryKind::device);
  vk::Buffer ob = device_vector(ctx, random_floats(a.n * a.o_stride, 44));
  vk::Buffer pb = device_vector(ctx, std::vector<uint32_t>{static_cast<uint32_t>(pos0) - a.pos0, 0, 0, 0});
  vk::Recorder rec(ctx);
  if (a.causal) ops.attention(rec, {&qb}, {&kb}, {&vb}, {&sb}, {&ob}, {&pb}, a);
  else ops.attention(rec, {&qb}, {&qb}, {&qb}, {&sb}, {&ob}, ops.zero_position(), a);
  rec.run();
  const std::vector<float> out = attention_reference(qkv, a.causal ? kc : qkv, a.causal ? vc : qkv, a, pos0);
  expect_close(read_floats(ctx, ob, out.size()), out, atol, rtol, what);
}

// attention_tiled.comp (coopmat off) over several blocks of 16 queries, the last partial, head
// dims 8 and 128 (the seed size's), keys over several chunks of 32 (causal from a cache with the
// position from the device, and bidirectional over packed rows), against the reference.
TEST(VulkanOps, TiledAttentionAcrossQueryBlocks) {
  PYLON_VULKAN_CONTEXT_OR_SKIP(ctx);
  vk::Ops ops(*ctx);
  ops.set_coopmat(false);
  for (const int hd : {8, 128}) {
    const int n = 37, H = 3, D = H * hd, pos0 = 30, T = 80;
    const std::vector<float> qkv = random_floats(n * 3 * D, 41), kc = random_floats(T * D, 42),
                             vc = random_floats(T * D, 43);
    for (const bool causal : {true, false})
      check_attention(*ctx, ops, attention_case(n, H, hd, T, pos0, causal), pos0, qkv, kc, vc, 4ull * n * H * T,
                      1e-5f, 1e-4f, "tiled attention, head dim " + std::to_string(hd) + (causal ? " causal" : ""));
  }
}

// attention_coopmat.comp (with attention_halves.comp's fp16 operands) where the device has
// cooperative matrices: head dims 16, 64 and 128, one block of 16 queries and several with a
// partial last, keys over several chunks of 32 with a partial last (causal from a cache with the
// position from the device; bidirectional over packed rows), against the reference. Queries in
// [-4, 4], so that the softmax is peaked and a key dropped or let through by the mask shows.
// Tolerance: fp16 rounding of q, k, v and the weights.
TEST(VulkanOps, CoopmatAttentionAgainstTheReference) {
  PYLON_VULKAN_CONTEXT_OR_SKIP(ctx);
  vk::Ops ops(*ctx);
  if (!ops.uses_coopmat(16)) GTEST_SKIP() << "no cooperative-matrix path on " << ctx->info().name;
  for (const auto& [hd, n] : {std::pair{16, 16}, std::pair{64, 77}, std::pair{128, 130}}) {
    const int H = 3, D = H * hd, pos0 = 30, T = pos0 + n + 9;
    std::vector<float> qkv = random_floats(n * 3 * D, 61);
    for (int i = 0; i < n; ++i)
      for (int c = 0; c < D; ++c) qkv[i * 3 * D + c] *= 4.f;  // q's thirds
    const std::vector<float> kc = random_floats(T * D, 62), vc = random_floats(T * D, 63);
    for (const bool causal : {true, false}) {
      const vk::Ops::AttentionArgs a = attention_case(n, H, hd, T, pos0, causal);
      const uint64_t scratch = vk::Ops::coopmat_attention_scratch(a);
      vk::Buffer probe = ctx->make_buffer(scratch, vk::MemoryKind::device);
      const std::string what = "coopmat attention, head dim " + std::to_string(hd) + (causal ? " causal" : "");
      ASSERT_TRUE(ops.uses_coopmat_attention(a, {&probe})) << what;
      check_attention(*ctx, ops, a, pos0, qkv, kc, vc, scratch, 2e-3f, 1e-2f, what);
    }
  }
}

// The qkv GEMV with RoPE and the KV append in its store (the GPU decode's first op) against the
// same work unfused: the row-per-invocation GEMV with the RMSNorm, then rope() with its KV append
// (each tested against the CPU above). Head dims 12 and 32, f16 / int8 / int4 weights (48 columns:
// int4 element by element, 64: whole words), rows per subgroup 2 and 4 (1 and 3 round up to whole
// pairs), split over 1, 2 and 4 subgroups; the cache rows other than position p must stay as they
// were.
TEST(VulkanOps, QkvGemvWithFusedRopeAndKvAppend) {
  PYLON_VULKAN_CONTEXT_OR_SKIP(ctx);
  vk::Ops ops(*ctx);
  ops.set_gemv_rows(false);
  if (ops.gemv_rows()) GTEST_SKIP() << "no subgroup GEMV on " << ctx->info().name;  // subgroups < 4
  for (const auto& [D, H] : {std::pair{48, 4}, std::pair{64, 2}}) {
    const int hd = D / H, half = hd / 2, T = 20;
    const uint32_t p = 9;
    std::vector<float> table(static_cast<size_t>(T) * half * 2);
    for (int t = 0; t < T; ++t)
      for (int i = 0; i < half; ++i) {
        const float a = float(t) * std::pow(10000.f, -float(2 * i) / float(hd));
        table[(t * half + i) * 2] = std::cos(a), table[(t * half + i) * 2 + 1] = std::sin(a);
      }
    vk::Buffer tb = device_vector(*ctx, table), pb = device_vector(*ctx, std::vector<uint32_t>{p, 0, 0, 0});
    const std::vector<float> x = random_floats(D, 51, -2.f, 2.f), k0 = random_floats(T * D, 52),
                             v0 = random_floats(T * D, 53);
    for (const EdgeDType dt : {EdgeDType::f16, EdgeDType::int8, EdgeDType::int4}) {
      std::deque<vk::Buffer> keep;
      const TestWeight tw = encode(dt, 3 * D, D, 32, true, 54);
      const vk::DeviceMatrix w = vk::upload_tensor(*ctx, tw.host(dt, 3 * D, D, 32, true), keep);
      const TestWeight tg = encode(EdgeDType::f16, 1, D, 0, false, 55), tbias = encode(EdgeDType::f16, 1, 3 * D, 0, false, 56);
      const vk::DeviceMatrix g = vk::upload_tensor(*ctx, tg.host(EdgeDType::f16, 1, D, 0, false), keep);
      const vk::DeviceMatrix b = vk::upload_tensor(*ctx, tbias.host(EdgeDType::f16, 1, 3 * D, 0, false), keep);
      vk::Buffer xb = device_vector(*ctx, x);
      // The reference: unfused, row per invocation.
      vk::Buffer qr = ctx->make_buffer(12ull * D, vk::MemoryKind::device);
      vk::Buffer kr = device_vector(*ctx, k0), vr = device_vector(*ctx, v0);
      ops.set_gemv_rows(true);
      vk::Recorder rec(*ctx);
      ops.normed_gemv(rec, {&qr}, 3u * D, {&xb}, 0, g, 1e-5f, w, &b, false);
      const vk::Ops::KvCache ref_cache{{&kr}, {&vr}};
      ops.rope(rec, {&qr}, {&tb}, {&pb}, 1, D, H, 0, &ref_cache);
      rec.run();
      const std::vector<float> q_ref = read_floats(*ctx, qr, 3 * D), k_ref = read_floats(*ctx, kr, T * D),
                               v_ref = read_floats(*ctx, vr, T * D);
      ops.set_gemv_rows(false);
      for (const vk::Ops::GemvShape shape : {vk::Ops::GemvShape{1, 1}, vk::Ops::GemvShape{4, 2},
                                             vk::Ops::GemvShape{3, 4}, vk::Ops::GemvShape{}}) {
        ops.set_gemv_shape(shape);
        ASSERT_TRUE(ops.fuses_rope(w));
        vk::Buffer qf = ctx->make_buffer(12ull * D, vk::MemoryKind::device);
        vk::Buffer kf = device_vector(*ctx, k0), vf = device_vector(*ctx, v0);
        ops.qkv_rope_gemv(rec, {&qf}, {&xb}, g, 1e-5f, w, b, {{&tb}, {&pb}, static_cast<uint32_t>(H), {{&kf}, {&vf}}});
        rec.run();
        const std::string what = std::string(edge_dtype_name(dt)) + " D " + std::to_string(D) + " shape " +
                                 std::to_string(shape.rows) + "x" + std::to_string(shape.split);
        expect_close(read_floats(*ctx, qf, 3 * D), q_ref, 1e-5f, 1e-4f, "fused qkv " + what);
        expect_close(read_floats(*ctx, kf, T * D), k_ref, 1e-5f, 1e-4f, "fused k append " + what);
        expect_close(read_floats(*ctx, vf, T * D), v_ref, 1e-5f, 1e-4f, "fused v append " + what);
      }
      ops.set_gemv_shape({});
    }
  }
}

// Past the shader's 3072 scores in shared memory the scores go through the scratch buffer: a
// causal query at position 3100 over a cache of 4200 rows, at head dims 16 and 128 (vec4 loads)
// and 18 (element by element); and the decode attention (chunks of 32 keys combined by each
// head's last workgroup; past 128 chunks the combine takes them in batches).
TEST(VulkanOps, AttentionOverALongContext) {
  PYLON_VULKAN_CONTEXT_OR_SKIP(ctx);
  vk::Ops ops(*ctx);
  for (const int D : {32, 36, 256}) {
    const int n = 2, H = 2, hd = D / H, pos0 = 3100, T = 4200;
    const std::vector<float> q = random_floats(n * D, 31), kc = random_floats(T * D, 32), vc = random_floats(T * D, 33);
    vk::Buffer qb = device_vector(*ctx, q), kb = device_vector(*ctx, kc), vb = device_vector(*ctx, vc);
    vk::Buffer sb = ctx->make_buffer(4ull * n * H * T, vk::MemoryKind::device);
    vk::Buffer ob = device_vector(*ctx, random_floats(n * D, 34));
    vk::Buffer pb = device_vector(*ctx, std::vector<uint32_t>{pos0, 0, 0, 0});
    vk::Ops::AttentionArgs a{};
    a.n = n, a.heads = H, a.hd = hd, a.pos0 = 0, a.causal = 1, a.q_off = 0, a.q_stride = D;
    a.k_off = 0, a.k_stride = D, a.v_off = 0, a.v_stride = D, a.o_stride = D, a.max_keys = T;
    a.scale = 1.f / std::sqrt(float(hd));
    vk::Recorder rec(*ctx);
    ops.attention(rec, {&qb}, {&kb}, {&vb}, {&sb}, {&ob}, {&pb}, a);
    rec.run();
    expect_close(read_floats(*ctx, ob, n * D), attention_reference(q, kc, vc, a, pos0), 1e-5f, 1e-4f,
                 "attention, long, head dim " + std::to_string(hd));
    // The decode form at positions 0 (one key), 40 (two chunks, the second partial, the rest
    // empty), 3100 and 4190 (131 chunks: two batches in the combine).
    vk::Buffer partials = ctx->make_buffer(4 * vk::Ops::attention_partials(H, hd, T), vk::MemoryKind::device);
    for (const uint32_t p : {0u, 40u, 3100u, 4190u}) {
      vk::Buffer p1 = device_vector(*ctx, std::vector<uint32_t>{p, 0, 0, 0});
      vk::Ops::AttentionArgs a1 = a;
      a1.n = 1;
      ops.attention_decode(rec, {&qb}, {&kb}, {&vb}, {&partials}, {&ob}, {&p1}, a1);
      rec.run();
      expect_close(read_floats(*ctx, ob, D), attention_reference(q, kc, vc, a1, static_cast<int>(p)), 1e-5f, 1e-4f,
                   "decode attention, head dim " + std::to_string(hd) + " position " + std::to_string(p));
    }
  }
}

}  // namespace
}  // namespace pylon

namespace pylon {
namespace {

// The cooperative-matrix GEMMs against the plain tiled GEMM (their oracle), where the device and
// the build support them (the H200 through the NVIDIA driver; not lavapipe): gemm_coopmat, and
// gemm_coopmat2 where VK_NV_cooperative_matrix2 is there too (the cases it takes: columns a
// multiple of 32, f16 as it is, int8 and int4 (groups a multiple of 8) decoded to fp16 first, here
// from 16 tokens and in pieces of 256 rows; tiles inside and at the edges; the rest fall back to
// gemm_coopmat). X and
// W are rounded to fp16 before the products (fp32 accumulate): per product a relative error up to
// 2^-10, so over `cols` products of |x·w| <= 1 with random signs: |out - ref| <= 2e-3·sqrt(cols) +
// 1e-2·|ref|. Bias, SiLU and the residual add: MatmulEveryDtypeAgainstTheCpu, through matmul.
TEST(VulkanOps, CoopmatGemmAgainstThePlainPath) {
  PYLON_VULKAN_CONTEXT_OR_SKIP(ctx);
  vk::Ops ops(*ctx);
  if (!ops.uses_coopmat(64)) GTEST_SKIP() << "no cooperative-matrix GEMM on " << ctx->info().name;
  // Whole-word loads (f16 / int8 / int4 / f32 rows) and the element-by-element ones (71 columns,
  // an f16 K step that ends mid-step, int4 groups of 96); tiles cut by the rows and tokens.
  const MatmulCase cases[] = {
      {EdgeDType::f16, 130, 256, 67}, {EdgeDType::int8, 70, 96, 33},     {EdgeDType::int4, 200, 128, 128},
      {EdgeDType::f16, 64, 2048, 128}, {EdgeDType::f32, 37, 71, 20},     {EdgeDType::f32, 65, 128, 16},
      {EdgeDType::f16, 40, 40, 17},    {EdgeDType::int8, 23, 2064, 16},  {EdgeDType::int4, 7, 576, 18, 96, true},
      {EdgeDType::int8, 300, 160, 260}, {EdgeDType::int4, 129, 512, 40, 64, false},
      {EdgeDType::f16, 300, 160, 260},  {EdgeDType::f16, 256, 512, 256}, {EdgeDType::int8, 600, 64, 40},
      {EdgeDType::int4, 520, 96, 33, 32, false},
      // K split where the tiles are few and the rows long (H200: 8 shares of 32 K steps, 2 of 9 with
      // the last step cut, 2 of 12 int8 decoded; the 64 x 2048 case above: 4 of 16).
      {EdgeDType::f16, 40, 4096, 16}, {EdgeDType::f16, 100, 1056, 40}, {EdgeDType::int8, 300, 1536, 20}};
  ops.set_coopmat2_dequant({16, 256 * 64 * 2});  // pieces of 256 rows (also the least a piece has)
  // gemm_coopmat, gemm_coopmat2 with its own K splits, and with every K split 3 ways (shares past
  // the last K step sum nothing).
  for (const uint32_t mode : {0u, 1u, 3u}) {
    const bool coopmat2 = mode > 0;
    if (coopmat2 && !ctx->info().coopmat2) break;
    ops.set_coopmat2(coopmat2);
    ops.set_coopmat2_tile({0, 0, 0, mode == 3 ? 3u : 0u});
    for (const MatmulCase& c : cases) {
      std::deque<vk::Buffer> keep;
      const TestWeight tw = encode(c.dtype, c.rows, c.cols, c.group, c.scale_f16, 21);
      const vk::DeviceMatrix w = vk::upload_tensor(*ctx, tw.host(c.dtype, c.rows, c.cols, c.group, c.scale_f16), keep);
      const bool takes2 = c.dtype != EdgeDType::f32 && c.cols % 32 == 0 && c.group % 8 == 0;
      ASSERT_EQ(ops.uses_coopmat2(c.n, w), coopmat2 && takes2) << edge_dtype_name(c.dtype) << " cols " << c.cols;
      const std::vector<float> x = random_floats(c.n * c.cols, 22);
      vk::Buffer xb = device_vector(*ctx, x), yp = device_vector(*ctx, random_floats(c.n * c.rows, 23)),
                 yc = device_vector(*ctx, random_floats(c.n * c.rows, 24));
      vk::Recorder rec(*ctx);
      ops.matmul_plain(rec, {&yp}, static_cast<uint32_t>(c.rows), {&xb}, 0, c.n, w, nullptr, false);
      ops.matmul(rec, {&yc}, static_cast<uint32_t>(c.rows), {&xb}, 0, c.n, w, nullptr, false);
      rec.run();
      expect_close(read_floats(*ctx, yc, c.n * c.rows), read_floats(*ctx, yp, c.n * c.rows),
                   2e-3f * std::sqrt(float(c.cols)), 1e-2f,
                   std::string(ops.uses_coopmat2(c.n, w) ? "coopmat2 /" + std::to_string(ops.coopmat2_tile_for(c.n, c.rows, c.cols).splits) + " "
                                                         : "coopmat ") + edge_dtype_name(c.dtype) +
                       " rows " + std::to_string(c.rows) + " cols " + std::to_string(c.cols) + " n " +
                       std::to_string(c.n));
    }
  }
}

}  // namespace
}  // namespace pylon

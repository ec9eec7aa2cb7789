// Vulkan rows: every shader against its CPU reference (src/ops/cpu, or the fp32 loop written here
// where the op has none there), element by element; fused and cooperative-matrix paths also
// against their unfused oracle on the same device.
#include "ops/vulkan/vulkan_op_cases.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <utility>
#include <vector>

#include "core/half.h"
#include "ops/cpu/ops.h"
#include "ops/cpu/quantized.h"
#include "ops/vulkan/weights.h"
#include "support/vulkan_test_util.h"

namespace pylon::vk::testing {
namespace {

using ::pylon::testing::Backend;
using ::pylon::testing::format_number;
using ::pylon::testing::shape_of;

// The device the rows share, by max_buffer_bytes; torn down after the last test.
struct SharedDevice {
  std::unique_ptr<vk::Context> ctx;
  std::unique_ptr<vk::Ops> ops;
  bool gemv_rows_default = false;
};
std::map<uint64_t, SharedDevice>& shared_devices() {
  static std::map<uint64_t, SharedDevice> devices;
  return devices;
}
class SharedDeviceTeardown : public ::testing::Environment {
 public:
  void TearDown() override { shared_devices().clear(); }
};
[[maybe_unused]] ::testing::Environment* const kTeardown =
    ::testing::AddGlobalTestEnvironment(new SharedDeviceTeardown);

// The shared device for these options, or nullptr where no Vulkan device opens.
SharedDevice* shared_device(uint64_t max_buffer_bytes) {
  auto [it, made] = shared_devices().try_emplace(max_buffer_bytes);
  SharedDevice& d = it->second;
  if (made) {
    vk::ContextOptions o;
    o.max_buffer_bytes = max_buffer_bytes;
    d.ctx = ::pylon::testing::vulkan_context_or_null(o);
    if (d.ctx) {
      d.ops = std::make_unique<vk::Ops>(*d.ctx);
      d.gemv_rows_default = d.ops->gemv_rows();
    }
  }
  return d.ctx ? &d : nullptr;
}

// Every knob of vk::Ops a row may turn, back at what the constructor chose.
vk::Ops& reset(SharedDevice& d) {
  vk::Ops& ops = *d.ops;
  ops.set_coopmat(true);
  ops.set_coopmat2(true);
  ops.set_coopmat2_tile({});
  ops.set_coopmat2_dequant({});
  ops.set_tiled_attention(true);
  ops.set_gemv_rows(d.gemv_rows_default);
  ops.set_gemv_texel(true);
  ops.set_gemv_shape({});
  ops.set_attention_chunk(0);
  return ops;
}

DType dtype_of(EdgeDType d) {
  switch (d) {
    case EdgeDType::f32: return DType::f32;
    case EdgeDType::f16: return DType::f16;
    case EdgeDType::int8: return DType::int8;
    case EdgeDType::int4: return DType::int4;
  }
  return DType::f32;
}

using Body = std::function<void(const OpRun&, vk::Context&, vk::Ops&)>;

// A Vulkan row on the shared device of these options; skips without one.
OpCase vulkan_case(std::string op, DType dtype, std::string shape, std::string variant, Body body,
                   uint64_t max_buffer_bytes = 0) {
  OpCase c{std::move(op), Backend::vulkan, dtype, std::move(shape), std::move(variant), {}, {}};
  c.run = [body = std::move(body), max_buffer_bytes](const OpRun& run) {
    SharedDevice& d = *shared_device(max_buffer_bytes);
    body(run, *d.ctx, reset(d));
  };
  c.skip = [max_buffer_bytes] {
    return shared_device(max_buffer_bytes) ? std::string() : std::string("no Vulkan device");
  };
  return c;
}

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

// An output buffer of n floats, every one NaN: an element the shader never writes fails its check.
vk::Buffer poisoned(vk::Context& ctx, size_t n) {
  return device_vector(ctx, std::vector<float>(n, std::numeric_limits<float>::quiet_NaN()));
}

std::vector<float> read_floats(vk::Context& ctx, const vk::Buffer& b, size_t n) {
  std::vector<float> v(n);
  ctx.download(b, 0, v.data(), n * 4);
  return v;
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

// An encoded weight on the device (its buffers kept in `keep`) with its decoding.
struct Weight {
  TestWeight host;
  vk::DeviceMatrix device;
};
Weight upload_weight(vk::Context& ctx, std::deque<vk::Buffer>& keep, EdgeDType d, int64_t rows, int64_t cols,
                     int group, bool scale_f16, uint32_t seed) {
  Weight w{encode(d, rows, cols, group, scale_f16, seed), {}};
  w.device = vk::upload_tensor(ctx, w.host.host(d, rows, cols, group, scale_f16), keep);
  return w;
}

std::string matmul_shape(const MatmulCase& c) {
  std::string s = shape_of({{"rows", c.rows}, {"cols", c.cols}, {"n", c.n}});
  if (c.dtype == EdgeDType::int4 && (c.group != 32 || !c.scale_f16))
    s += " group=" + std::to_string(c.group) + (c.scale_f16 ? " scales=f16" : " scales=f32");
  return s;
}

std::string gemv_shape_name(vk::Ops::GemvShape s) {
  return s.rows == 0 && s.split == 0 ? "auto" : std::to_string(s.rows) + "x" + std::to_string(s.split);
}

// The matmuls' bound: weights decode exactly on both sides, so the results differ only by fp32
// summation order (and, for int8, by the row scale applied once after the sum): |out - ref| <=
// 1e-4 + 1e-4·|ref| for |x|, |w| <= 1 and up to a few hundred columns, plus 2^-20·Σ|x·w| for the
// summation order of long rows (thousands of columns). The coopmat GEMM (where the device runs
// it) rounds x to fp16 first: each product then errs by up to 2^-11 of itself, so its bound adds
// 2^-11·Σ|x·w| per output.
constexpr Tolerance kMatmulTol{.rtol = 1e-4, .atol = 1e-4};

// y (n, rows) = act(x·Wᵀ + b) (+ y0) in fp32 from the decoded weights, and each output's slack.
struct MatmulReference {
  std::vector<float> value;
  std::vector<double> slack;
};
MatmulReference matmul_reference(const std::vector<float>& x, uint32_t x_off, uint32_t n, const std::vector<float>& w,
                                 int64_t rows, int64_t cols, const std::vector<float>* bias,
                                 const std::vector<float>* y0, bool silu, bool coopmat) {
  MatmulReference r{std::vector<float>(static_cast<size_t>(n * rows)), std::vector<double>(static_cast<size_t>(n * rows))};
  for (uint32_t i = 0; i < n; ++i)
    for (int64_t row = 0; row < rows; ++row) {
      float acc = 0, magnitude = 0;
      for (int64_t k = 0; k < cols; ++k) {
        const float p = x[x_off + i * cols + k] * w[row * cols + k];
        acc += p, magnitude += std::fabs(p);
      }
      const size_t o = i * rows + row;
      r.slack[o] = (coopmat ? magnitude / 2048.f : 0.f) + magnitude / 1048576.f;
      if (bias) acc += (*bias)[row];
      if (silu) cpu::silu_forward(&acc, &acc, 1);
      r.value[o] = y0 ? (*y0)[o] + acc : acc;
    }
  return r;
}

void run_matmul(const OpRun& run, vk::Context& ctx, vk::Ops& ops, const MatmulCase& c, MatmulMode m, MatmulPath path,
                vk::Ops::GemvShape shape) {
  const bool texel = path == MatmulPath::gemv_rows_texel || path == MatmulPath::gemm_texel;
  if (texel && !ctx.info().texel_reads) GTEST_SKIP() << "no texel buffers on " << ctx.info().name;
  // int8 / int4 on gemm_coopmat2 (where it runs) from 16 tokens: decoded to fp16 first.
  ops.set_coopmat2_dequant({16, vk::Ops::Coopmat2Dequant{}.piece_bytes});
  ops.set_gemv_rows(path == MatmulPath::gemv_rows || path == MatmulPath::gemv_rows_texel ||
                    path == MatmulPath::gemm_texel);
  ops.set_gemv_texel(texel);
  ops.set_gemv_shape(shape);
  std::deque<vk::Buffer> keep;
  const Weight w = upload_weight(ctx, keep, c.dtype, c.rows, c.cols, c.group, c.scale_f16, 7);
  const Weight b = upload_weight(ctx, keep, EdgeDType::f16, 1, c.rows, 0, false, 8);
  const std::vector<float> x = random_floats(m.x_off + c.n * c.cols, 9);
  const std::vector<float> y0 = random_floats(c.n * c.rows, 10);
  const bool coopmat = ops.uses_coopmat(c.n);
  const MatmulReference ref = matmul_reference(x, m.x_off, c.n, w.host.dequantized, c.rows, c.cols,
                                               m.bias ? &b.host.dequantized : nullptr, m.accumulate ? &y0 : nullptr,
                                               m.silu, coopmat);
  vk::Buffer xb = device_vector(ctx, x), yb = m.accumulate ? device_vector(ctx, y0) : poisoned(ctx, y0.size());
  vk::Recorder rec(ctx);
  ops.matmul(rec, {&yb}, static_cast<uint32_t>(c.rows), {&xb}, m.x_off, c.n, w.device, m.bias ? &b.device : nullptr,
             m.accumulate, m.silu);
  rec.run();
  const std::string what = "y (" + std::to_string(w.device.chunks.size()) + " chunks" + (coopmat ? ", coopmat)" : ")");
  run.expect_close(what, read_floats(ctx, yb, y0.size()), ref.value, DType::f32, kMatmulTol, ref.slack);
}

// Attention written out plainly: queries rows of q with stride a.q_stride, keys/values as a says
// (query head h reads key/value head h / a.kv_group), the first query at position pos0.
std::vector<float> attention_reference(const std::vector<float>& q, const std::vector<float>& K,
                                       const std::vector<float>& Vv, const vk::Ops::AttentionArgs& a, int pos0) {
  const int n = static_cast<int>(a.n), H = static_cast<int>(a.heads), hd = static_cast<int>(a.hd);
  std::vector<float> out(static_cast<size_t>(n) * a.o_stride);
  for (int i = 0; i < n; ++i)
    for (int h = 0; h < H; ++h) {
      const int kvh = h / static_cast<int>(a.kv_group);
      const int keys = a.causal ? pos0 + i + 1 : static_cast<int>(a.keys);
      std::vector<float> s(static_cast<size_t>(keys));
      float mx = -INFINITY, sum = 0;
      for (int j = 0; j < keys; ++j) {
        float d = 0;
        for (int c = 0; c < hd; ++c)
          d += q[a.q_off + i * a.q_stride + h * hd + c] * K[a.k_off + j * a.k_stride + kvh * hd + c];
        s[j] = d * a.scale, mx = std::max(mx, s[j]);
      }
      for (auto& e : s) sum += (e = std::exp(e - mx));
      for (int c = 0; c < hd; ++c) {
        float acc = 0;
        for (int j = 0; j < keys; ++j) acc += s[j] / sum * Vv[a.v_off + j * a.v_stride + kvh * hd + c];
        out[i * a.o_stride + h * hd + c] = acc;
      }
    }
  return out;
}

// (positions, hd/2) {cos, sin} of p·θ^(−2i/hd), θ = 10000.
std::vector<float> rope_table(int T, int hd) {
  const int half = hd / 2;
  std::vector<float> table(static_cast<size_t>(T) * half * 2);
  for (int t = 0; t < T; ++t)
    for (int i = 0; i < half; ++i) {
      const float a = float(t) * std::pow(10000.f, -float(2 * i) / float(hd));
      table[(t * half + i) * 2] = std::cos(a), table[(t * half + i) * 2 + 1] = std::sin(a);
    }
  return table;
}

// The attention rows' fp32 bound: scores over <= a few thousand keys and the weighted sums in fp32
// in another order than the reference, and the GPU's exp (a few ulps).
constexpr Tolerance kAttentionTol{.rtol = 1e-4, .atol = 1e-5};

}  // namespace

OpCase matmul(const MatmulCase& c, MatmulMode m, MatmulPath path, vk::Ops::GemvShape shape,
              uint64_t max_buffer_bytes) {
  std::string variant = "x_off=" + std::to_string(m.x_off);
  if (m.bias) variant += " bias";
  if (m.accumulate) variant += " accumulate";
  if (m.silu) variant += " silu";
  switch (path) {
    case MatmulPath::gemv_subgroup: variant += " gemv_subgroup " + gemv_shape_name(shape); break;
    case MatmulPath::gemv_rows: variant += " gemv_rows"; break;
    case MatmulPath::gemv_rows_texel: variant += " gemv_rows_texel"; break;
    case MatmulPath::gemm: variant += " gemm"; break;
    case MatmulPath::gemm_texel: variant += " gemm_rows_texel"; break;
  }
  if (max_buffer_bytes) variant += " bindings of " + std::to_string(max_buffer_bytes) + " bytes";
  return vulkan_case("matmul", dtype_of(c.dtype), matmul_shape(c), variant,
                     [=](const OpRun& run, vk::Context& ctx, vk::Ops& ops) { run_matmul(run, ctx, ops, c, m, path, shape); },
                     max_buffer_bytes);
}

// Rows of whole 16-byte words only (what it takes); check_matmul's bound without coopmat. With a
// final norm (llama's head, decode_layer_llama's HEAD 2): against cpu::rmsnorm_forward then the
// fp32 dot, normed_gemv's bound.
OpCase decode_head(const MatmulCase& c, uint32_t rows_a_set, uint32_t groups, std::optional<EdgeDType> norm) {
  std::string variant = "rows_a_set=" + std::to_string(rows_a_set) + " grid=" + std::to_string(groups);
  if (norm) variant += std::string(" final_norm=") + edge_dtype_name(*norm);
  return vulkan_case("decode_head", dtype_of(c.dtype), matmul_shape(c), variant,
                     [=](const OpRun& run, vk::Context& ctx, vk::Ops& ops) {
    std::deque<vk::Buffer> keep;
    const Weight w = upload_weight(ctx, keep, c.dtype, c.rows, c.cols, c.group, c.scale_f16, 7);
    const Weight g = upload_weight(ctx, keep, norm.value_or(EdgeDType::f32), 1, c.cols, 0, false, 8);
    const vk::DeviceMatrix* gd = norm ? &g.device : nullptr;
    ASSERT_EQ(ops.decode_head_unsupported(w.device, gd), "");
    const std::vector<float> x = random_floats(c.cols, 9, -2.f, 2.f);
    std::vector<float> h = x, rstd(1);
    if (norm)
      cpu::rmsnorm_forward(h.data(), rstd.data(), x.data(), g.host.dequantized.data(), 1, static_cast<int>(c.cols), 1e-5f);
    const MatmulReference ref = matmul_reference(h, 0, 1, w.host.dequantized, c.rows, c.cols, nullptr, nullptr, false, false);
    ops.set_gemv_shape({rows_a_set, 1});
    vk::Buffer xb = device_vector(ctx, x), yb = poisoned(ctx, c.rows);
    vk::Recorder rec(ctx);
    ops.decode_head(rec, {&yb}, {&xb}, w.device, {groups, 256}, gd, 1e-5f);
    rec.run();
    run.expect_close("y", read_floats(ctx, yb, c.rows), ref.value, DType::f32, kMatmulTol, ref.slack);
  });
}

// y [+]= act((rmsnorm(x)·g)·Wᵀ + bias) against cpu::rmsnorm_forward then the fp32 dot; the bound
// is the matmuls' (the normalised x is about 1 in size too).
OpCase normed_gemv(const MatmulCase& c, EdgeDType norm, uint32_t x_off, bool silu, bool accumulate,
                   vk::Ops::GemvShape shape) {
  const bool rows = shape.rows == 0;
  std::string variant = std::string("norm=") + edge_dtype_name(norm) + " x_off=" + std::to_string(x_off);
  if (accumulate) variant += " accumulate";
  if (silu) variant += " silu";
  variant += rows ? " gemv_rows" : " gemv_subgroup " + gemv_shape_name(shape);
  return vulkan_case("normed_gemv", dtype_of(c.dtype), matmul_shape(c), variant,
                     [=](const OpRun& run, vk::Context& ctx, vk::Ops& ops) {
    std::deque<vk::Buffer> keep;
    const Weight w = upload_weight(ctx, keep, c.dtype, c.rows, c.cols, c.group, c.scale_f16, 41);
    const Weight g = upload_weight(ctx, keep, norm, 1, c.cols, 0, false, 42);
    const Weight b = upload_weight(ctx, keep, EdgeDType::f16, 1, c.rows, 0, false, 43);
    const std::vector<float> x = random_floats(x_off + c.cols, 44, -2.f, 2.f), y0 = random_floats(c.rows, 45);
    std::vector<float> h(c.cols), rstd(1);
    cpu::rmsnorm_forward(h.data(), rstd.data(), x.data() + x_off, g.host.dequantized.data(), 1,
                         static_cast<int>(c.cols), 1e-5f);
    const MatmulReference ref = matmul_reference(h, 0, 1, w.host.dequantized, c.rows, c.cols, &b.host.dequantized,
                                                 accumulate ? &y0 : nullptr, silu, false);
    ops.set_gemv_rows(rows);
    ops.set_gemv_shape(shape);
    vk::Buffer xb = device_vector(ctx, x), yb = accumulate ? device_vector(ctx, y0) : poisoned(ctx, y0.size());
    vk::Recorder rec(ctx);
    ops.normed_gemv(rec, {&yb}, static_cast<uint32_t>(c.rows), {&xb}, x_off, g.device, 1e-5f, w.device, &b.device,
                    accumulate, silu);
    rec.run();
    run.expect_close("y", read_floats(ctx, yb, ref.value.size()), ref.value, DType::f32, kMatmulTol, ref.slack);
  });
}

// The cooperative-matrix GEMMs against the plain tiled GEMM (their oracle), where the device and the
// build support them (the H200 through the NVIDIA driver; not lavapipe): gemm_coopmat, and
// gemm_coopmat2 where VK_NV_cooperative_matrix2 is there too (the cases it takes: columns a multiple
// of 32, f16 as it is, int8 and int4 (groups a multiple of 8) decoded to fp16 first, here from 16
// tokens and in pieces of 256 rows; tiles inside and at the edges; the rest fall back to
// gemm_coopmat). X and W are rounded to fp16 before the products (fp32 accumulate): per product a
// relative error up to 2^-10, so over `cols` products of |x·w| <= 1 with random signs:
// |out - ref| <= 2e-3·sqrt(cols) + 1e-2·|ref|. Bias, SiLU and the residual add: the matmul rows.
OpCase coopmat_gemm(const MatmulCase& c, uint32_t mode) {
  const std::string variant = mode == 0 ? "gemm_coopmat" : mode == 1 ? "gemm_coopmat2" : "gemm_coopmat2 K split 3 ways";
  return vulkan_case("matmul", dtype_of(c.dtype), matmul_shape(c), variant + " against matmul_plain",
                     [=](const OpRun& run, vk::Context& ctx, vk::Ops& ops) {
    if (!ops.uses_coopmat(64)) GTEST_SKIP() << "no cooperative-matrix GEMM on " << ctx.info().name;
    const bool coopmat2 = mode > 0;
    if (coopmat2 && !ctx.info().coopmat2) GTEST_SKIP() << "no VK_NV_cooperative_matrix2 on " << ctx.info().name;
    ops.set_coopmat2_dequant({16, 256 * 64 * 2});  // pieces of 256 rows (also the least a piece has)
    ops.set_coopmat2(coopmat2);
    ops.set_coopmat2_tile({0, 0, 0, mode == 3 ? 3u : 0u});
    std::deque<vk::Buffer> keep;
    const Weight w = upload_weight(ctx, keep, c.dtype, c.rows, c.cols, c.group, c.scale_f16, 21);
    const bool takes2 = c.dtype != EdgeDType::f32 && c.cols % 32 == 0 && c.group % 8 == 0;
    ASSERT_EQ(ops.uses_coopmat2(c.n, w.device), coopmat2 && takes2);
    const std::vector<float> x = random_floats(c.n * c.cols, 22);
    vk::Buffer xb = device_vector(ctx, x), yp = poisoned(ctx, c.n * c.rows), yc = poisoned(ctx, c.n * c.rows);
    vk::Recorder rec(ctx);
    ops.matmul_plain(rec, {&yp}, static_cast<uint32_t>(c.rows), {&xb}, 0, c.n, w.device, nullptr, false);
    ops.matmul(rec, {&yc}, static_cast<uint32_t>(c.rows), {&xb}, 0, c.n, w.device, nullptr, false);
    rec.run();
    const std::string what = ops.uses_coopmat2(c.n, w.device)
                                 ? "y (coopmat2 /" + std::to_string(ops.coopmat2_tile_for(c.n, c.rows, c.cols).splits) + ")"
                                 : "y (coopmat)";
    run.expect_close(what + " against matmul_plain", read_floats(ctx, yc, c.n * c.rows),
                     read_floats(ctx, yp, c.n * c.rows), DType::f32,
                     Tolerance{.rtol = 1e-2, .atol = 2e-3 * std::sqrt(double(c.cols))});
  });
}

// The gather is exact.
OpCase embedding(int V, int D, const std::vector<uint32_t>& tokens) {
  const int n = static_cast<int>(tokens.size());
  return vulkan_case("embedding", DType::f16, shape_of({{"V", V}, {"D", D}, {"n", n}}), "",
                     [=](const OpRun& run, vk::Context& ctx, vk::Ops& ops) {
    std::deque<vk::Buffer> keep;
    const Weight e = upload_weight(ctx, keep, EdgeDType::f16, V, D, 0, false, 1);
    vk::Buffer tb = device_vector(ctx, tokens), xb = poisoned(ctx, static_cast<size_t>(n) * D);
    vk::Recorder rec(ctx);
    ops.embedding(rec, {&xb}, {&tb}, static_cast<uint32_t>(n), e.device);
    rec.run();
    const std::vector<int32_t> ids(tokens.begin(), tokens.end());
    std::vector<float> ref(static_cast<size_t>(n) * D);
    cpu::embedding_forward(ref.data(), ids.data(), e.host.dequantized.data(), n, D);
    run.expect_close("x", read_floats(ctx, xb, ref.size()), ref, DType::f32, ::pylon::testing::kExact);
  });
}

// Rows of a multiple of 4 columns are read as vec4s; fewer and more columns than the workgroup's 256
// invocations. Bound: a sum of `cols` squares and a GPU rsqrt (a few ulps).
OpCase rmsnorm(EdgeDType weights, int n, int cols, uint64_t seed) {
  return vulkan_case("rmsnorm", dtype_of(weights), shape_of({{"n", n}, {"cols", cols}}), "",
                     [=](const OpRun& run, vk::Context& ctx, vk::Ops& ops) {
    std::deque<vk::Buffer> keep;
    const Weight g = upload_weight(ctx, keep, weights, 1, cols, 0, false, static_cast<uint32_t>(seed));
    const std::vector<float> x = random_floats(static_cast<size_t>(n) * cols, static_cast<uint32_t>(seed + 1));
    vk::Buffer xb = device_vector(ctx, x), yb = poisoned(ctx, x.size());
    vk::Recorder rec(ctx);
    ops.rmsnorm(rec, {&yb}, {&xb}, g.device, static_cast<uint32_t>(n), 1e-5f);
    rec.run();
    std::vector<float> y(x.size()), rstd(static_cast<size_t>(n));
    cpu::rmsnorm_forward(y.data(), rstd.data(), x.data(), g.host.dequantized.data(), n, cols, 1e-5f);
    run.expect_close("y", read_floats(ctx, yb, y.size()), y, DType::f32, Tolerance{.rtol = 1e-5, .atol = 1e-6});
  });
}

OpCase silu(int n) {
  return vulkan_case("silu", DType::f32, shape_of({{"n", n}}), "in place",
                     [=](const OpRun& run, vk::Context& ctx, vk::Ops& ops) {
    const std::vector<float> s = random_floats(static_cast<size_t>(n), 5, -8.f, 8.f);
    std::vector<float> ref(s.size());
    cpu::silu_forward(ref.data(), s.data(), static_cast<int64_t>(s.size()));
    vk::Buffer sb = device_vector(ctx, s);
    vk::Recorder rec(ctx);
    ops.silu(rec, {&sb}, static_cast<uint32_t>(n));
    rec.run();
    // The GPU's exp: a few ulps.
    run.expect_close("x", read_floats(ctx, sb, s.size()), ref, DType::f32, Tolerance{.rtol = 1e-5, .atol = 1e-6});
  });
}

OpCase swiglu(int n, int width) {
  return vulkan_case("swiglu", DType::f32, shape_of({{"n", n}, {"F", width}}), "",
                     [=](const OpRun& run, vk::Context& ctx, vk::Ops& ops) {
    const std::vector<float> x = random_floats(static_cast<size_t>(n) * 2 * width, 7, -8.f, 8.f);
    std::vector<float> ref(static_cast<size_t>(n) * width);
    cpu::swiglu_forward(ref.data(), x.data(), n, width);
    vk::Buffer xb = device_vector(ctx, x), yb = poisoned(ctx, ref.size());
    vk::Recorder rec(ctx);
    ops.swiglu(rec, {&yb}, {&xb}, static_cast<uint32_t>(n), static_cast<uint32_t>(width));
    rec.run();
    // The GPU's exp: a few ulps.
    run.expect_close("y", read_floats(ctx, yb, ref.size()), ref, DType::f32, Tolerance{.rtol = 1e-5, .atol = 1e-6});
  });
}

// Against cpu::rope_forward; the cache rows other than pos0 .. pos0 + n - 1 must stay as they were.
OpCase rope(int n, HeadLayout hs, int pos0, int push, int T) {
  const int H = hs.heads, KV = hs.kv_heads, hd = hs.head_dim;
  const std::string shape = shape_of({{"n", n}, {"H", H}, {"KV", KV}, {"hd", hd}, {"pos", pos0}, {"T", T}});
  return vulkan_case("rope", DType::f32, shape, "push=" + std::to_string(push) + " kv append",
                     [=](const OpRun& run, vk::Context& ctx, vk::Ops& ops) {
    const int row = hs.row(), Q = H * hd, C = KV * hd;  // C: a cache row
    std::vector<float> qkv = random_floats(static_cast<size_t>(n) * row, 11), ref = qkv;
    cpu::rope_forward(ref.data(), 1, n, HeadLayout{H, KV, hd}, 10000.f, pos0);
    vk::Buffer qb = device_vector(ctx, qkv), tb = device_vector(ctx, rope_table(T, hd));
    vk::Buffer pb = device_vector(ctx, std::vector<uint32_t>{static_cast<uint32_t>(pos0 - push), 0, 0, 0});
    const std::vector<float> kc0 = random_floats(static_cast<size_t>(T) * C, 15),
                             vc0 = random_floats(static_cast<size_t>(T) * C, 16);
    vk::Buffer kb = device_vector(ctx, kc0), vb = device_vector(ctx, vc0);
    vk::Recorder rec(ctx);
    const vk::Ops::KvCache cache{{&kb}, {&vb}};
    ops.rope(rec, {&qb}, {&tb}, {&pb}, static_cast<uint32_t>(n), hs, static_cast<uint32_t>(push), &cache);
    rec.run();
    std::vector<float> k_ref = kc0, v_ref = vc0;
    for (int i = 0; i < n; ++i)
      for (int c = 0; c < C; ++c) {
        k_ref[(pos0 + i) * C + c] = ref[i * row + Q + c];
        v_ref[(pos0 + i) * C + c] = qkv[i * row + Q + C + c];
      }
    // The GPU's angles from the table (fp32 cos and sin) against the reference's: a few ulps.
    const Tolerance tol{.rtol = 1e-5, .atol = 1e-6};
    run.expect_close("qkv", read_floats(ctx, qb, qkv.size()), ref, DType::f32, tol);
    run.expect_close("k cache", read_floats(ctx, kb, k_ref.size()), k_ref, DType::f32, tol);
    run.expect_close("v cache", read_floats(ctx, vb, v_ref.size()), v_ref, DType::f32, ::pylon::testing::kExact);
  });
}

OpCase attention(int n, HeadLayout hs, int T, int pos0, int push, bool causal, AttentionPath path) {
  const int H = hs.heads, KV = hs.kv_heads, hd = hs.head_dim;
  const std::string shape = shape_of({{"n", n}, {"H", H}, {"KV", KV}, {"hd", hd}, {"T", T}, {"pos", pos0}});
  const char* path_name = path == AttentionPath::tiled ? "attention_tiled" : path == AttentionPath::plain ? "attention_plain" : "attention_coopmat";
  const std::string variant = std::string(causal ? "causal push=" + std::to_string(push) + " " : "") + path_name;
  return vulkan_case("attention", DType::f32, shape, variant, [=](const OpRun& run, vk::Context& ctx, vk::Ops& ops) {
    const int Q = H * hd, C = KV * hd, row = static_cast<int>(hs.row());
    vk::Ops::AttentionArgs a{};
    a.n = n, a.heads = H, a.hd = hd, a.pos0 = push, a.causal = causal, a.q_off = 0, a.q_stride = row;
    a.o_stride = Q, a.max_keys = T, a.scale = 1.f / std::sqrt(float(hd)), a.kv_group = H / KV;
    if (causal) a.keys = pos0 + n, a.k_off = 0, a.k_stride = C, a.v_off = 0, a.v_stride = C;
    else a.keys = n, a.k_off = Q, a.k_stride = row, a.v_off = Q + C, a.v_stride = row;
    std::vector<float> qkv = random_floats(static_cast<size_t>(n) * row, 41);
    const std::vector<float> kc = random_floats(static_cast<size_t>(T) * C, 42),
                             vc = random_floats(static_cast<size_t>(T) * C, 43);
    uint64_t scratch = 4ull * n * H * T;
    Tolerance tol = kAttentionTol;
    if (path == AttentionPath::coopmat) {
      if (!ops.uses_coopmat(16)) GTEST_SKIP() << "no cooperative-matrix path on " << ctx.info().name;
      // Queries in [-4, 4], so that the softmax is peaked and a key dropped or let through by the
      // mask shows. Tolerance: fp16 rounding of q, k, v and the weights.
      for (int i = 0; i < n; ++i)
        for (int c = 0; c < Q; ++c) qkv[i * row + c] *= 4.f;
      scratch = vk::Ops::coopmat_attention_scratch(a);
      tol = Tolerance{.rtol = 1e-2, .atol = 2e-3};
    }
    ops.set_coopmat(path == AttentionPath::coopmat);
    ops.set_tiled_attention(path != AttentionPath::plain);
    vk::Buffer qb = device_vector(ctx, qkv), kb = device_vector(ctx, kc), vb = device_vector(ctx, vc);
    vk::Buffer sb = ctx.make_buffer(scratch, vk::MemoryKind::device), ob = poisoned(ctx, static_cast<size_t>(n) * Q);
    vk::Buffer pb = device_vector(ctx, std::vector<uint32_t>{static_cast<uint32_t>(pos0 - push), 0, 0, 0});
    if (path == AttentionPath::coopmat) {
      ASSERT_TRUE(ops.uses_coopmat_attention(a, {&sb}));
    }
    vk::Recorder rec(ctx);
    if (causal) ops.attention(rec, {&qb}, {&kb}, {&vb}, {&sb}, {&ob}, {&pb}, a);
    else ops.attention(rec, {&qb}, {&qb}, {&qb}, {&sb}, {&ob}, ops.zero_position(), a);
    rec.run();
    const std::vector<float> ref = attention_reference(qkv, causal ? kc : qkv, causal ? vc : qkv, a, pos0);
    run.expect_close("out", read_floats(ctx, ob, ref.size()), ref, DType::f32, tol);
  });
}

namespace {
// n queries (rows of q) over a cache of 4200 rows, the causal attention's arguments at device
// position p.
vk::Ops::AttentionArgs long_context_args(HeadLayout hs, uint32_t n) {
  vk::Ops::AttentionArgs a{};
  const auto u32 = [](int v) { return static_cast<uint32_t>(v); };
  a.n = n, a.heads = u32(hs.heads), a.hd = u32(hs.head_dim), a.pos0 = 0, a.causal = 1, a.q_off = 0;
  a.q_stride = u32(hs.q_dim()), a.k_off = 0, a.k_stride = u32(hs.kv_dim()), a.v_off = 0;
  a.v_stride = u32(hs.kv_dim()), a.o_stride = u32(hs.q_dim()), a.max_keys = 4200, a.kv_group = u32(hs.group());
  a.scale = 1.f / std::sqrt(float(hs.head_dim));
  return a;
}
}  // namespace

OpCase attention_long_context(HeadLayout hs) {
  return vulkan_case("attention", DType::f32,
                     shape_of({{"n", 2}, {"H", hs.heads}, {"KV", hs.kv_heads}, {"hd", hs.head_dim}, {"T", 4200}, {"pos", 3100}}),
                     "causal scores in scratch", [=](const OpRun& run, vk::Context& ctx, vk::Ops& ops) {
    const int n = 2, T = 4200;
    const uint32_t pos0 = 3100;
    const std::vector<float> q = random_floats(static_cast<size_t>(n) * hs.q_dim(), 31),
                             kc = random_floats(static_cast<size_t>(T) * hs.kv_dim(), 32),
                             vc = random_floats(static_cast<size_t>(T) * hs.kv_dim(), 33);
    vk::Buffer qb = device_vector(ctx, q), kb = device_vector(ctx, kc), vb = device_vector(ctx, vc);
    vk::Buffer sb = ctx.make_buffer(4ull * n * hs.heads * T, vk::MemoryKind::device), ob = poisoned(ctx, q.size());
    vk::Buffer pb = device_vector(ctx, std::vector<uint32_t>{pos0, 0, 0, 0});
    const vk::Ops::AttentionArgs a = long_context_args(hs, n);
    vk::Recorder rec(ctx);
    ops.attention(rec, {&qb}, {&kb}, {&vb}, {&sb}, {&ob}, {&pb}, a);
    rec.run();
    run.expect_close("out", read_floats(ctx, ob, q.size()), attention_reference(q, kc, vc, a, pos0), DType::f32,
                     kAttentionTol);
  });
}

OpCase attention_decode(HeadLayout hs, uint32_t p) {
  return vulkan_case("attention_decode", DType::f32,
                     shape_of({{"n", 1}, {"H", hs.heads}, {"KV", hs.kv_heads}, {"hd", hs.head_dim}, {"T", 4200}, {"pos", p}}), "",
                     [=](const OpRun& run, vk::Context& ctx, vk::Ops& ops) {
    const int T = 4200;
    const std::vector<float> q = random_floats(static_cast<size_t>(hs.q_dim()), 31),
                             kc = random_floats(static_cast<size_t>(T) * hs.kv_dim(), 32),
                             vc = random_floats(static_cast<size_t>(T) * hs.kv_dim(), 33);
    vk::Buffer qb = device_vector(ctx, q), kb = device_vector(ctx, kc), vb = device_vector(ctx, vc);
    vk::Buffer ob = poisoned(ctx, q.size()), pb = device_vector(ctx, std::vector<uint32_t>{p, 0, 0, 0});
    vk::Buffer partials = ctx.make_buffer(4 * vk::Ops::attention_partials(static_cast<uint32_t>(hs.heads), static_cast<uint32_t>(hs.head_dim), T), vk::MemoryKind::device);
    const vk::Ops::AttentionArgs a = long_context_args(hs, 1);
    vk::Recorder rec(ctx);
    ops.attention_decode(rec, {&qb}, {&kb}, {&vb}, {&partials}, {&ob}, {&pb}, a);
    rec.run();
    run.expect_close("out", read_floats(ctx, ob, q.size()), attention_reference(q, kc, vc, a, static_cast<int>(p)),
                     DType::f32, kAttentionTol);
  });
}

// Head dims 12 and 32, f16 / int8 / int4 weights (48 columns: int4 element by element, 64: whole
// words), rows per subgroup 1 .. 4 (1 and 3 round up to whole pairs), split over 1, 2 and 4
// subgroups; the cache rows other than position 9 must stay as they were.
OpCase qkv_rope_gemv(int D, int H, EdgeDType dtype, vk::Ops::GemvShape shape) {
  return vulkan_case("qkv_rope_gemv", dtype_of(dtype), shape_of({{"D", D}, {"H", H}, {"pos", 9}}),
                     "gemv_subgroup " + gemv_shape_name(shape) + " against normed_gemv + rope",
                     [=](const OpRun& run, vk::Context& ctx, vk::Ops& ops) {
    ops.set_gemv_rows(false);
    if (ops.gemv_rows()) GTEST_SKIP() << "no subgroup GEMV on " << ctx.info().name;  // subgroups < 4
    const int hd = D / H, T = 20;
    const uint32_t p = 9;
    vk::Buffer tb = device_vector(ctx, rope_table(T, hd)), pb = device_vector(ctx, std::vector<uint32_t>{p, 0, 0, 0});
    const std::vector<float> x = random_floats(D, 51, -2.f, 2.f), k0 = random_floats(static_cast<size_t>(T) * D, 52),
                             v0 = random_floats(static_cast<size_t>(T) * D, 53);
    std::deque<vk::Buffer> keep;
    const Weight w = upload_weight(ctx, keep, dtype, 3 * D, D, 32, true, 54);
    const Weight g = upload_weight(ctx, keep, EdgeDType::f16, 1, D, 0, false, 55);
    const Weight b = upload_weight(ctx, keep, EdgeDType::f16, 1, 3 * D, 0, false, 56);
    vk::Buffer xb = device_vector(ctx, x);
    // The oracle: unfused, row per invocation.
    vk::Buffer qr = poisoned(ctx, 3ull * D), kr = device_vector(ctx, k0), vr = device_vector(ctx, v0);
    ops.set_gemv_rows(true);
    vk::Recorder rec(ctx);
    ops.normed_gemv(rec, {&qr}, 3u * D, {&xb}, 0, g.device, 1e-5f, w.device, &b.device, false);
    const vk::Ops::KvCache ref_cache{{&kr}, {&vr}};
    ops.rope(rec, {&qr}, {&tb}, {&pb}, 1, HeadLayout::multi_head(D, H), 0, &ref_cache);
    rec.run();
    const std::vector<float> q_ref = read_floats(ctx, qr, 3 * D), k_ref = read_floats(ctx, kr, T * D),
                             v_ref = read_floats(ctx, vr, T * D);
    ops.set_gemv_rows(false);
    ops.set_gemv_shape(shape);
    ASSERT_TRUE(ops.fuses_rope(w.device));
    vk::Buffer qf = poisoned(ctx, 3ull * D), kf = device_vector(ctx, k0), vf = device_vector(ctx, v0);
    ops.qkv_rope_gemv(rec, {&qf}, {&xb}, g.device, 1e-5f, w.device, b.device,
                      {{&tb}, {&pb}, static_cast<uint32_t>(H), {{&kf}, {&vf}}});
    rec.run();
    // The same sums in another order (subgroup reductions): fp32 rounding.
    const Tolerance tol{.rtol = 1e-4, .atol = 1e-5};
    run.expect_close("qkv against the unfused", read_floats(ctx, qf, 3 * D), q_ref, DType::f32, tol);
    run.expect_close("k cache against the unfused", read_floats(ctx, kf, T * D), k_ref, DType::f32, tol);
    run.expect_close("v cache against the unfused", read_floats(ctx, vf, T * D), v_ref, DType::f32, tol);
  });
}

}  // namespace pylon::vk::testing

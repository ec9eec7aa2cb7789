#include "ops/vulkan/ops.h"

#include <algorithm>
#include <iterator>
#include <limits>
#include <string>

#include "core/error.h"

namespace pylon::vk {
namespace {

struct MatmulPush {  // shaders/matmul_common.glsl
  uint32_t n, rows, cols, row_base, ldy, x_off, wtype, group, scale_f16, bias, accumulate, silu, norm;
  float norm_eps;
  uint32_t rope_heads;
};

uint32_t groups_for(uint64_t items, uint32_t per_group, uint32_t cap = 65535) {
  return static_cast<uint32_t>(std::min<uint64_t>((items + per_group - 1) / per_group, cap));
}

// A grid of rows of up to 65535 workgroups for `items` of per_group each, for shaders that index
// gl_WorkGroupID.x + gl_WorkGroupID.y · gl_NumWorkGroups.x (and skip what lies past the end).
struct Grid2d {
  uint32_t x, y;
};
Grid2d grid_2d(uint64_t items, uint32_t per_group) {
  return {groups_for(items, per_group), static_cast<uint32_t>((items + 65535ull * per_group - 1) / (65535ull * per_group))};
}

// attention_halves.comp's rows in the coopmat attention's scratch: the queries rounded up to 16,
// the keys to 64 (the two shaders compute the same). 64 was the chunk of keys of an earlier
// version; a multiple of today's chunk of 32 suffices, so 64 only zero-fills up to 32 rows more.
struct HalvesRows {
  uint64_t queries, keys;
};
HalvesRows halves_rows(const Ops::AttentionArgs& a) {
  return {(a.n + 15ull) / 16 * 16, (std::max(a.max_keys, a.keys) + 63ull) / 64 * 64};
}

}  // namespace

uint64_t row_bytes(EdgeDType dtype, int64_t cols) {
  switch (dtype) {
    case EdgeDType::f32: return static_cast<uint64_t>(cols) * 4;
    case EdgeDType::f16: return static_cast<uint64_t>(cols) * 2;
    case EdgeDType::int8: return static_cast<uint64_t>(cols);
    case EdgeDType::int4: return static_cast<uint64_t>(cols + 1) / 2;
  }
  return 0;
}

Ops::Ops(Context& ctx)
    : ctx_(ctx),
      kernels_(ctx),
      gemv_rows_(ctx.info().type == VK_PHYSICAL_DEVICE_TYPE_CPU || ctx.info().subgroup_size < 4),
      gemv_texel_(ctx.info().texel_reads),
      dummy_(ctx.make_buffer(16, MemoryKind::device)),
      zero_(ctx.make_buffer(64, MemoryKind::device)),
      counters_(ctx.make_buffer(4 * kMaxHeads, MemoryKind::device)),
      sync_(ctx.make_buffer(4 * (16 + kMaxHeads), MemoryKind::device)),
      failed_(ctx.make_buffer(16, MemoryKind::host)) {
  const std::vector<uint32_t> zeros(16 + kMaxHeads, 0);
  ctx.upload(zero_, 0, zeros.data(), 64);
  ctx.upload(counters_, 0, zeros.data(), 4 * kMaxHeads);
  ctx.upload(sync_, 0, zeros.data(), 4 * (16 + kMaxHeads));
  ctx.upload(failed_, 0, zeros.data(), 16);
}

bool Ops::uses_coopmat(uint32_t n) const {
  // The coopmat kernel assumes 8 subgroups of 32 (NVIDIA, most desktop GPUs); prefill only.
  return coopmat_on_ && ctx_.info().coopmat && ctx_.info().subgroup_size == 32 && n >= 16;
}

Ops::Coopmat2Tile Ops::coopmat2_tile_for(uint32_t n, int64_t rows, int64_t cols) const {
  // The largest tile whose grid still fills the GPU (about one workgroup a compute unit), else the
  // smallest; K steps of 128 columns, 64 for the 128 x 256 tile. H200, seed size, 512 tokens, µs a
  // GEMM at K steps of 64 / 128 (bench/vulkan_notes.md, 2026-12-02): 8192 x 2048 (128 x 256) 143 /
  // 275, 6144 x 2048 (128 x 128) 139 / 133, 2048 x 8192 (64 x 128) 164 / 136, 2048 x 2048 58 / 50.
  // A prompt of up to 32 tokens: 32 x 64 tiles, K steps of 64, the K split below. There the GEMMs
  // wait on their loads, not the MMAs, and more, smaller workgroups keep more loads in flight
  // (H200, seed size, 16 tokens, f16, µs: 8192 x 2048 20.8 against 45.7 for the 64 x 64 tile,
  // 2048 x 8192 21.4 against 34.8; bench/vulkan_notes.md, 2026-12-02 09:20-10:10).
  const uint64_t units = std::max<uint32_t>(ctx_.info().compute_units, 1);
  const auto& g = ctx_.info().coopmat2_granularity;
  const bool short_prompt = n <= 32 && g[0] && g[1] && g[2] && 32 % g[0] == 0 && 64 % g[1] == 0 && 64 % g[2] == 0;
  const Coopmat2Tile tiles[] = {{128, 256, 64}, {128, 128, 128}, {64, 128, 128}, {64, 64, 128}};
  Coopmat2Tile pick = tiles[std::size(tiles) - 1];
  if (short_prompt)
    pick = {32, 64, 64};
  else
    for (const Coopmat2Tile& t : tiles) {
      const uint64_t groups = (n + t.tokens - 1ull) / t.tokens * ((static_cast<uint64_t>(rows) + t.rows - 1) / t.rows);
      if (groups * 10 >= units * 9) {
        pick = t;
        break;
      }
    }
  if (coopmat2_tile_.tokens && coopmat2_tile_.rows) pick.tokens = coopmat2_tile_.tokens, pick.rows = coopmat2_tile_.rows;
  if (coopmat2_tile_.k) pick.k = coopmat2_tile_.k;
  // Too few tiles even so (few tokens and rows): K split over up to 8 workgroups a tile, each at
  // least 4 K steps, until the grid fills the GPU; for a short prompt each at least 8 K steps,
  // until 3 workgroups an SM (the same runs, GEMM and reduce: 8192 x 2048 split 4 ways 20.8 + 4.3
  // µs, 8 ways 27.6 + 4.6; 2048 x 8192 8 ways 21.4 + 4.6, 16 ways 21.9 + 4.9, 4 ways 28.3 + 4.3).
  const uint64_t groups = (n + pick.tokens - 1ull) / pick.tokens * ((static_cast<uint64_t>(rows) + pick.rows - 1) / pick.rows);
  const uint64_t steps = (cols + pick.k - 1) / pick.k;
  pick.splits = 1;
  if (coopmat2_tile_.splits) pick.splits = coopmat2_tile_.splits;
  else if (short_prompt)
    while (pick.splits < 8 && groups * pick.splits < units * 3 && steps >= 8ull * pick.splits * 2) pick.splits *= 2;
  else
    while (pick.splits < 8 && groups * pick.splits * 10 < units * 9 && steps >= 4ull * pick.splits * 2) pick.splits *= 2;
  return pick;
}

const Buffer& Ops::scratch(std::vector<Buffer>& list, uint64_t bytes) {
  if (list.empty() || list.back().size() < bytes) list.push_back(ctx_.make_buffer(bytes, MemoryKind::device));
  return list.back();
}

bool Ops::uses_coopmat2(uint32_t n, const DeviceMatrix& w) const {
  const DeviceInfo& info = ctx_.info();
  const auto& g = info.coopmat2_granularity;
  const Coopmat2Tile t = coopmat2_tile_for(n, w.rows, w.cols);
  const bool tile = g[0] && g[1] && g[2] && t.tokens % g[0] == 0 && t.rows % g[1] == 0 && t.k % g[2] == 0;
  // Rows of whole 16-byte words; int8 / int4 decoded to fp16 first where the tokens amortise that.
  const bool decoded = (w.dtype == EdgeDType::int8 || (w.dtype == EdgeDType::int4 && w.group % 8 == 0)) &&
                       n >= coopmat2_dequant_.min_tokens;
  const bool layout = (w.dtype == EdgeDType::f16 || decoded) && w.cols % 32 == 0;
  return coopmat2_on_ && info.coopmat2 && uses_coopmat(n) && tile && layout;
}

Ops::GemvShape Ops::gemv_shape_for(const DeviceMatrix& w) const {
  const uint32_t subgroups = std::max<uint32_t>(1, 128 / std::max<uint32_t>(ctx_.info().subgroup_size, 1));
  // From decode runs on the H200 (bench/vulkan_notes.md, 2026-11-30 13:50 UTC): f16 is bound by
  // memory and wants as many subgroups as rows; int8 and int4 spend more per byte on decoding,
  // so several rows share each x load (int4 most), and the long rows of ffn.2 (8192 columns) are
  // split over subgroups. The head (32000 rows) has parallelism enough with one or two rows.
  GemvShape s = gemv_shape_;
  const bool int4 = w.dtype == EdgeDType::int4, int8 = w.dtype == EdgeDType::int8;
  const bool head = w.rows >= 16384, wide = w.rows >= 4096, long_rows = w.cols >= 8192;
  if (s.rows == 0) {
    s.rows = 1;
    if (int4) s.rows = head ? 2 : wide ? 4 : long_rows ? 2 : 1;
    if (int8) s.rows = head ? 1 : wide || long_rows ? 2 : 1;
  }
  if (s.split == 0) s.split = long_rows ? (int4 || int8 ? 4 : 2) : int4 && wide && !head ? 2 : 1;
  s.split = std::clamp<uint32_t>(s.split, 1, subgroups);
  while (subgroups % s.split) --s.split;  // a divisor of the workgroup's subgroups
  return s;
}

void Ops::set_decode_tuning(DecodeTuning t) {
  for (const auto& [what, loads] : {std::pair{"layer", t.layer_loads}, std::pair{"head", t.head_loads}})
    PYLON_CHECK(loads == 0 || loads == 2 || loads == 4 || loads == 8 || loads == 16, "Vulkan: ", what,
                " loads ", loads, " is not 2, 4, 8 or 16 (the persistent kernel's 16-byte words in flight a lane)");
  tuning_ = t;
}

void Ops::matmul(Recorder& r, const BufferView& y, uint32_t ldy, const BufferView& x, uint32_t x_off,
                 uint32_t n, const DeviceMatrix& w, const DeviceMatrix* bias, bool accumulate, bool silu) {
  // CPU devices: the texel GEMV over 4 tokens at once where rows are whole 16-byte words
  // (gemv_common.glsl's whole_words), else the tiled GEMM (lane-by-lane loads on llvmpipe).
  const bool words = x_off % 4 == 0 && row_bytes(w.dtype, w.cols) % 16 == 0 &&
                     (w.dtype != EdgeDType::int4 || w.group % 32 == 0);
  const char* kernel = n == 1                  ? "gemv"
                       : uses_coopmat2(n, w)   ? "gemm_coopmat2"
                       : uses_coopmat(n)       ? "gemm_coopmat"
                       : gemv_texel_ && words ? "gemm_rows_texel"
                                            : "gemm_tiled";
  matmul_with(kernel, r, y, ldy, x, x_off, n, w, bias, accumulate, silu, nullptr, 0.f, nullptr);
}

void Ops::normed_gemv(Recorder& r, const BufferView& y, uint32_t ldy, const BufferView& x, uint32_t x_off,
                      const DeviceMatrix& norm, float eps, const DeviceMatrix& w, const DeviceMatrix* bias,
                      bool accumulate, bool silu) {
  PYLON_ASSERT(norm.chunks.size() == 1 && norm.cols == w.cols, "RMSNorm weights of ", w.cols, " columns");
  matmul_with("gemv", r, y, ldy, x, x_off, 1, w, bias, accumulate, silu, &norm, eps, nullptr);
}

bool Ops::fuses_rope(const DeviceMatrix& w) const {
  return !gemv_rows_ && w.chunks.size() == 1 && w.rows % 3 == 0;
}

void Ops::qkv_rope_gemv(Recorder& r, const BufferView& qkv, const BufferView& x, const DeviceMatrix& norm, float eps,
                        const DeviceMatrix& w, const DeviceMatrix& bias, const RopeArgs& rope) {
  PYLON_ASSERT(fuses_rope(w) && norm.chunks.size() == 1 && norm.cols == w.cols && rope.heads > 0 &&
                   (w.rows / 3) % (2 * rope.heads) == 0,
               "qkv_rope_gemv on a ", w.rows, "x", w.cols, " weight in ", w.chunks.size(), " chunks");
  matmul_with("gemv", r, qkv, static_cast<uint32_t>(w.rows), x, 0, 1, w, &bias, false, false, &norm, eps, &rope);
}

void Ops::matmul_plain(Recorder& r, const BufferView& y, uint32_t ldy, const BufferView& x,
                       uint32_t x_off, uint32_t n, const DeviceMatrix& w, const DeviceMatrix* bias,
                       bool accumulate, bool silu) {
  matmul_with(n == 1 ? "gemv" : "gemm_tiled", r, y, ldy, x, x_off, n, w, bias, accumulate, silu, nullptr,
              0.f, nullptr);
}

void Ops::matmul_with(const char* kernel, Recorder& r, const BufferView& y, uint32_t ldy,
                      const BufferView& x, uint32_t x_off, uint32_t n, const DeviceMatrix& w,
                      const DeviceMatrix* bias, bool accumulate, bool silu, const DeviceMatrix* norm,
                      float eps, const RopeArgs* rope) {
  PYLON_ASSERT(!bias || bias->chunks.size() == 1, "a bias is one chunk");
  const bool gemv = std::string(kernel) == "gemv";  // either GEMV, as set_gemv_rows says
  if (gemv)
    kernel = !gemv_rows_ ? "gemv_subgroup"
             : norm      ? "gemv_rows_norm"
             : gemv_texel_ ? "gemv_rows_texel"
                           : "gemv_rows";
  const std::string name = kernel;
  // x (binding 0), W's words (2) and the scales' (3) as texels
  const bool texel = name == "gemv_rows_texel" || name == "gemm_rows_texel";
  const std::vector<VkFormat> texels = {VK_FORMAT_R32G32B32A32_SFLOAT, VK_FORMAT_UNDEFINED,
                                        VK_FORMAT_R32G32B32A32_UINT, VK_FORMAT_R32_UINT};
  const bool subgroup_gemv = gemv && !gemv_rows_;
  GemvShape shape = subgroup_gemv ? gemv_shape_for(w) : GemvShape{1, 1};
  if (rope) shape.rows = std::max<uint32_t>(2, shape.rows + shape.rows % 2);  // whole rotation pairs
  std::vector<uint32_t> spec;  // specialization constants
  if (subgroup_gemv) spec = {shape.rows, shape.split};
  if (name == "gemm_rows_texel") spec = {shader_wtype(w.dtype)};
  if (name == "gemm_coopmat") {
    // FAST (1 + its type): X in whole vec4s and W in whole words at every K step of 32 columns.
    const bool fast = x_off % 4 == 0 && w.cols % 32 == 0 && w.dtype != EdgeDType::f32 &&
                      (w.dtype != EdgeDType::int4 || w.group % 16 == 0);
    spec = {7u, fast ? 1 + shader_wtype(w.dtype) : 0u};  // PARTS (every part), FAST
  }
  if (name == "gemm_coopmat2") {
    coopmat2_matmul(r, y, ldy, x, x_off, n, w, bias, accumulate, silu);
    return;
  }
  const BufferView none{&dummy_, 0, 0};
  const Kernel& k = kernels_.get(kernel, subgroup_gemv ? 11 : 7, sizeof(MatmulPush),
                                 texel ? texels : std::vector<VkFormat>{}, spec);
  const uint32_t subgroups = std::max<uint32_t>(1, 128 / std::max<uint32_t>(ctx_.info().subgroup_size, 1));
  const uint32_t rows_per_gemv_group = subgroups / shape.split * shape.rows;
  for (const DeviceMatrix::Chunk& c : w.chunks) {
    MatmulPush p{};
    p.n = n;
    p.rows = static_cast<uint32_t>(c.rows);
    p.cols = static_cast<uint32_t>(w.cols);
    p.row_base = static_cast<uint32_t>(c.row_begin);
    p.ldy = ldy;
    p.x_off = x_off;
    p.wtype = shader_wtype(w.dtype);
    p.group = static_cast<uint32_t>(std::max(w.group, 1));
    p.scale_f16 = w.scale_f16 ? 1 : 0;
    p.bias = bias ? (bias->dtype == EdgeDType::f16 ? 2 : 1) : 0;
    p.accumulate = accumulate ? 1 : 0;
    p.silu = silu ? 1 : 0;
    p.norm = norm ? (norm->dtype == EdgeDType::f16 ? 2 : 1) : 0;
    p.norm_eps = eps;
    p.rope_heads = rope ? rope->heads : 0;
    const BufferView scales = w.scales.buffer ? w.scales : none;
    const BufferView b = bias ? bias->chunks[0].values : none;
    const BufferView g = norm ? norm->chunks[0].values : none;
    std::vector<BufferView> views{x, c.values, c.values, scales, b, y, g};
    if (subgroup_gemv) {  // the RoPE and KV append bindings (gemv_subgroup.comp)
      views.insert(views.end(), {rope ? rope->table : none, rope ? rope->position : none,
                                 rope ? rope->cache.k : none, rope ? rope->cache.v : none});
    }
    r.label_next(name + (rope ? "+rope " : " ") + std::to_string(c.rows) + "x" +
                 std::to_string(w.cols) + " " + edge_dtype_name(w.dtype));
    if (name == "gemm_rows_texel")  // 8 rows by 4 tokens an invocation, 64 a workgroup
      r.dispatch(k, views, p, groups_for((static_cast<uint64_t>(c.rows) + 7) / 8, 64, 65535), groups_for(n, 4));
    else if (gemv && gemv_rows_)  // a row per invocation (eight with texels), 64 a workgroup (gemv_rows.glsl)
      r.dispatch(k, views, p, groups_for(texel ? (static_cast<uint64_t>(c.rows) + 7) / 8 : c.rows, 64, 65535));
    else if (gemv)  // shape.rows rows per `shape.split` subgroups
      r.dispatch(k, views, p, groups_for(static_cast<uint64_t>(c.rows), rows_per_gemv_group, 65535));
    else  // tiles of 64 tokens by 64 weight rows (gemm_tiled) or 128 (gemm_coopmat)
      r.dispatch(k, views, p, groups_for(static_cast<uint64_t>(c.rows), name == "gemm_coopmat" ? 128 : 64),
                 groups_for(n, 64));
  }
}

void Ops::coopmat2_matmul(Recorder& r, const BufferView& y, uint32_t ldy, const BufferView& x, uint32_t x_off,
                          uint32_t n, const DeviceMatrix& w, const DeviceMatrix* bias, bool accumulate, bool silu) {
  const BufferView none{&dummy_, 0, 0};
  // The activations as fp16 first (coopmat2_halves.comp), then read from offset 0.
  const uint64_t count = static_cast<uint64_t>(n) * static_cast<uint64_t>(w.cols);
  const Buffer& x16 = scratch(halves_, count * 2);
  const struct {
    uint32_t count, x_off;
  } hp{static_cast<uint32_t>(count), x_off};
  r.label_next("coopmat2_halves");
  const Grid2d hg = grid_2d(count / 8, 256);  // 8 values an invocation
  r.dispatch(kernels_.get("coopmat2_halves", 2, sizeof(hp)), {x, {&x16}}, hp, hg.x, hg.y);
  // int8 / int4: pieces of whole rows decoded to fp16 (coopmat2_weights.comp), each multiplied
  // right after; f16: each chunk read as it is.
  const bool decoded = w.dtype != EdgeDType::f16;
  const uint64_t row_halves = static_cast<uint64_t>(w.cols) * 2;
  const int64_t piece = decoded ? std::max<int64_t>(256, static_cast<int64_t>(coopmat2_dequant_.piece_bytes / row_halves) / 256 * 256)
                                : std::numeric_limits<int64_t>::max();
  int64_t most = 0;  // rows of the largest piece
  for (const DeviceMatrix::Chunk& c : w.chunks) most = std::max(most, std::min(piece, c.rows));
  const Buffer* w16 = decoded ? &scratch(weight_halves_, static_cast<uint64_t>(most) * row_halves) : nullptr;
  struct {
    uint32_t rows, cols, first, row_base, wtype, group, scale_f16;
  } dp{0, static_cast<uint32_t>(w.cols), 0, 0, shader_wtype(w.dtype), static_cast<uint32_t>(std::max(w.group, 1)),
       w.scale_f16 ? 1u : 0u};
  const std::string type = std::string(" ") + edge_dtype_name(w.dtype) + (decoded ? " as f16" : "");
  for (const DeviceMatrix::Chunk& c : w.chunks)
    for (int64_t first = 0; first < c.rows; first += piece) {
      const int64_t rows = std::min(piece, c.rows - first);
      const std::string shape = std::to_string(rows) + "x" + std::to_string(w.cols);
      BufferView wv = c.values;
      if (decoded) {
        dp.rows = static_cast<uint32_t>(rows), dp.first = static_cast<uint32_t>(first);
        dp.row_base = static_cast<uint32_t>(c.row_begin);
        // runs of 8 columns, 4 an invocation of 256
        const Grid2d dg = grid_2d(static_cast<uint64_t>(rows) * static_cast<uint64_t>(w.cols) / 8, 1024);
        r.label_next("coopmat2_weights " + shape + " " + edge_dtype_name(w.dtype));
        r.dispatch(kernels_.get("coopmat2_weights", 3, sizeof(dp)), {c.values, w.scales, {w16}}, dp, dg.x, dg.y);
        wv = {w16};
      }
      const Coopmat2Tile tile = coopmat2_tile_for(n, rows, w.cols);
      MatmulPush p{};
      p.n = n;
      p.rows = static_cast<uint32_t>(rows);
      p.cols = static_cast<uint32_t>(w.cols);
      p.row_base = static_cast<uint32_t>(c.row_begin + first);
      p.ldy = ldy;
      p.wtype = shader_wtype(EdgeDType::f16);
      p.bias = bias ? (bias->dtype == EdgeDType::f16 ? 2 : 1) : 0;
      p.accumulate = accumulate ? 1 : 0;
      p.silu = silu ? 1 : 0;
      const BufferView b = bias ? bias->chunks[0].values : none;
      const Kernel& gemm = kernels_.get("gemm_coopmat2", 7, sizeof(MatmulPush), {}, {tile.tokens, tile.rows, tile.k});
      const uint32_t gx = groups_for(static_cast<uint64_t>(rows), tile.rows), gy = groups_for(n, tile.tokens);
      if (tile.splits <= 1) {  // tiles of tile.tokens by tile.rows
        r.label_next("gemm_coopmat2 " + shape + type);
        r.dispatch(gemm, {{&x16}, wv, wv, none, b, y, none}, p, gx, gy);
        continue;
      }
      // Split K: each K share's raw sums into the scratch, then summed with the epilogue.
      const Buffer& partial = scratch(partials_, uint64_t{tile.splits} * n * static_cast<uint64_t>(rows) * 4);
      MatmulPush ps = p;
      ps.ldy = p.rows, ps.row_base = 0, ps.bias = ps.accumulate = ps.silu = 0;
      r.label_next("gemm_coopmat2 " + shape + type + " /" + std::to_string(tile.splits));
      r.dispatch(gemm, {{&x16}, wv, wv, none, none, {&partial}, none}, ps, gx, gy, tile.splits);
      const Grid2d rg = grid_2d(static_cast<uint64_t>(n) * static_cast<uint64_t>(rows), 256);  // an element each
      r.label_next("coopmat2_reduce");
      r.dispatch(kernels_.get("coopmat2_reduce", 7, sizeof(MatmulPush), {}, {tile.splits}),
                 {{&partial}, none, none, none, b, y, none}, p, rg.x, rg.y);
    }
}

void Ops::embedding(Recorder& r, const BufferView& x, const BufferView& tokens, uint32_t n,
                    const DeviceMatrix& embed) {
  struct {
    uint32_t n, dim, row_base, rows, f16;
  } p{n, static_cast<uint32_t>(embed.cols), 0, 0, embed.dtype == EdgeDType::f16 ? 1u : 0u};
  const Kernel& k = kernels_.get("embedding", 3, sizeof(p));
  for (const DeviceMatrix::Chunk& c : embed.chunks) {
    p.row_base = static_cast<uint32_t>(c.row_begin);
    p.rows = static_cast<uint32_t>(c.rows);
    r.dispatch(k, {tokens, c.values, x}, p, 1, n);
  }
}

void Ops::rmsnorm(Recorder& r, const BufferView& y, const BufferView& x, const DeviceMatrix& w,
                  uint32_t n, float eps) {
  struct {
    uint32_t dim, f16;
    float eps;
  } p{static_cast<uint32_t>(w.cols), w.dtype == EdgeDType::f16 ? 1u : 0u, eps};
  r.dispatch(kernels_.get("rmsnorm", 3, sizeof(p)), {x, w.chunks.at(0).values, y}, p, n);
}

void Ops::silu(Recorder& r, const BufferView& x, uint32_t count) {
  const uint32_t p = count;
  r.dispatch(kernels_.get("silu", 1, sizeof(p)), {x}, p, groups_for(count, 256, 4096));
}

void Ops::swiglu(Recorder& r, const BufferView& y, const BufferView& x, uint32_t n, uint32_t width) {
  const struct {
    uint32_t n, width;
  } p{n, width};
  r.dispatch(kernels_.get("swiglu", 2, sizeof(p)), {x, y}, p, groups_for(uint64_t{n} * width, 256, 4096));
}

void Ops::rope(Recorder& r, const BufferView& qkv, const BufferView& table, const BufferView& position,
               uint32_t n, const HeadLayout& heads, uint32_t pos0, const KvCache* append) {
  PYLON_CHECK(heads.heads > 0 && heads.head_dim > 0 && heads.head_dim % 2 == 0 && heads.kv_heads > 0 &&
                  heads.heads % heads.kv_heads == 0,
              "Vulkan rope: ", heads.heads, " heads over ", heads.kv_heads, " key/value heads of ", heads.head_dim);
  const auto u32 = [](int v) { return static_cast<uint32_t>(v); };
  const struct {
    uint32_t n, heads, kv_heads, hd, pos0, append;
  } p{n, u32(heads.heads), u32(heads.kv_heads), u32(heads.head_dim), pos0, append ? 1u : 0u};
  const BufferView none{&dummy_, 0, 0};
  r.dispatch(kernels_.get("rope", 5, sizeof(p)),
             {qkv, table, position, append ? append->k : none, append ? append->v : none}, p,
             groups_for(u32(heads.q_dim() + heads.kv_dim()) / 2, 64), n);
}

void Ops::attention(Recorder& r, const BufferView& q, const BufferView& k, const BufferView& v,
                    const BufferView& scores, const BufferView& out, const BufferView& position,
                    const AttentionArgs& a) {
  PYLON_CHECK(a.hd <= 256, "Vulkan attention: head dim ", a.hd, " > 256");
  PYLON_CHECK(a.kv_group > 0 && a.heads % a.kv_group == 0, "Vulkan attention: ", a.heads, " heads in groups of ",
              a.kv_group);
  if (tiled_attention_ && uses_coopmat_attention(a, scores)) {
    // The operands as fp16 in the scratch (Qh's rows, then Kh's and Vh's together), then 16 queries
    // of a head a subgroup, 4 a workgroup (attention_coopmat.comp).
    const HalvesRows rows = halves_rows(a);
    r.dispatch(kernels_.get("attention_halves", 5, sizeof(a)), {q, k, v, scores, position}, a,
               groups_for(a.heads * a.hd / 8, 64), static_cast<uint32_t>(rows.queries + rows.keys));
    r.dispatch(kernels_.get("attention_coopmat", 3, sizeof(a), {}, {a.hd / 16}), {scores, out, position}, a,
               (a.n + 63) / 64, a.heads);
    return;
  }
  // 16 queries a workgroup where keys and values are rows of vec4s and hd <= 128
  // (attention_tiled.comp), else one (attention.comp).
  const bool vec4s = a.hd % 4 == 0 && a.k_off % 4 == 0 && a.k_stride % 4 == 0 && a.v_off % 4 == 0 &&
                     a.v_stride % 4 == 0;
  if (vec4s && a.hd <= 128 && tiled_attention_)
    r.dispatch(kernels_.get("attention_tiled", 6, sizeof(a)), {q, k, v, scores, out, position}, a, (a.n + 15) / 16,
               a.heads);
  else
    r.dispatch(kernels_.get("attention", 6, sizeof(a)), {q, k, v, scores, out, position}, a, a.n, a.heads);
}

uint64_t Ops::coopmat_attention_scratch(const AttentionArgs& a) {
  const HalvesRows rows = halves_rows(a);
  return (rows.queries + 2 * rows.keys) * a.heads * a.hd * 2;  // halves
}

bool Ops::uses_coopmat_attention(const AttentionArgs& a, const BufferView& scores) const {
  const uint64_t room = scores.size ? scores.size : scores.buffer->size() - scores.offset;
  const HalvesRows rows = halves_rows(a);
  return uses_coopmat(a.n) && a.hd % 16 == 0 && a.hd <= 128 && rows.queries + rows.keys <= 65535 &&
         coopmat_attention_scratch(a) <= room;
}

uint64_t Ops::attention_partials(uint32_t heads, uint32_t hd, uint32_t max_keys) {
  // Per head and chunk of keys (m, l, o); then per head decode_layer.comp's weight of the token's
  // value row (value_weight_at); then, 64-bit aligned, its tagged pairs of two floats (tagged_at:
  // q, k, v, the attention's output, the heads' weights: 4D + heads).
  const uint64_t chunks = (max_keys + kAttentionChunk - 1) / kAttentionChunk;
  const uint64_t weights = heads * chunks * (hd + 2) + heads;
  return (weights + 1) / 2 * 2 + 2 * (4ull * heads * hd + heads);
}

void Ops::attention_decode(Recorder& r, const BufferView& q, const BufferView& k, const BufferView& v,
                           const BufferView& partials, const BufferView& out, const BufferView& position,
                           const AttentionArgs& a) {
  PYLON_ASSERT(a.n == 1, "attention_decode takes one query");
  PYLON_CHECK(a.hd <= 256, "Vulkan attention: head dim ", a.hd, " > 256");
  PYLON_CHECK(a.heads <= kMaxHeads, "Vulkan attention: ", a.heads, " heads > ", kMaxHeads);
  PYLON_CHECK(a.kv_group > 0 && a.heads % a.kv_group == 0, "Vulkan attention: ", a.heads, " heads in groups of ",
              a.kv_group);
  const uint32_t chunks = (a.max_keys + kAttentionChunk - 1) / kAttentionChunk;
  r.dispatch(kernels_.get("attention_decode", 7, sizeof(a)),
             {q, k, v, partials, position, {&counters_, 0, 4ull * kMaxHeads}, out}, a, chunks, a.heads);
}

}  // namespace pylon::vk

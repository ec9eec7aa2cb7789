// Ops::decode_layers: a causal decode token through its blocks in as few dispatches as their
// weights' buffers allow (shaders/decode_layer.comp: MiniLLM's blocks in the module decode_layer,
// llama's in decode_layer_llama, the same source with -DLLAMA), the grid found by a residency
// probe, and the flag that says a grid barrier gave up (the host then redoes the token op by op).
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"
#include "ops/vulkan/ops.h"

namespace pylon::vk {
namespace {

constexpr uint32_t kBindings = 26;  // decode_layer.comp's
constexpr uint32_t kTableWords = 16;  // per block: decode_layer.comp's Table

// 16-byte words in flight per lane for weights of dtype d: 64 weights a lane a step in each
// (f16 8, int8 4, int4 2). H200, seed size, ms a token alternated in one call (2026-12-01,
// bench/vulkan_notes.md): f16 0.550-0.554 at 8, 0.609-0.639 at 4, 0.601-0.604 at 6; int8
// 0.482-0.513 at 4, 0.573-0.631 at 8, 0.531 at 2; int4 0.529-0.536 at 2, 0.541-0.544 at 4.
// layer_kernel raises it to the rows a subgroup takes. DecodeTuning::layer_loads overrides (benchmarks).
uint32_t layer_loads(EdgeDType d, const Ops::DecodeTuning& t) {
  const uint32_t loads = d == EdgeDType::int4 ? 2 : d == EdgeDType::int8 ? 4 : 8;
  return std::clamp<uint32_t>(t.layer_loads ? t.layer_loads : loads, 2, 16);
}
// The head's (decode_head): the blocks' unless DecodeTuning::head_loads says.
uint32_t head_loads(EdgeDType d, const Ops::DecodeTuning& t) {
  return t.head_loads ? std::clamp<uint32_t>(t.head_loads, 2, 16) : layer_loads(d, t);
}

// decode_layer.comp's shared memory for workgroups of `threads` staging rows of up to `xs` floats,
// `loads` 16-byte words in flight a lane: xs4, red, part_sums, qs, kps, pv, wts, the flag, a column
// slice's values (SL floats) and its rows' partial dots (loads x threads; counted at 4 loads at
// least, as many as layer_kernel may raise them to).
uint64_t shared_bytes(int64_t xs, uint32_t threads, uint32_t loads) {
  return 4 * (static_cast<uint64_t>(xs) + threads / 4 + threads + 2 * 256 + 4 * 256 + 256 + 64 +
              static_cast<uint64_t>(std::max(loads, 4u)) * threads) + 4;
}

// A block's staged row (floats): D (x), at least 512 for the attention's scores of an
// item (keys per item <= this); a llama block's whole 32-float runs (its rows' last words read
// the staged row up to their end, zeros past D).
int64_t block_xs(int64_t dim, bool llama) {
  const int64_t xs = std::max<int64_t>(dim, 512);
  return llama ? (xs + 31) / 32 * 32 : xs;
}

struct LayerPush {  // decode_layer.comp
  uint32_t dim, heads, max_keys, group, scale_f16, bias_f16, norm_f16;
  float eps, attn_scale;
  uint32_t spin_limit, probe, split, chunk, head_rows, blocks, first_row, embed;
};
struct LlamaPush {  // decode_layer.comp with LLAMA: MiniLLM's push constants, then the block's sizes
  LayerPush base;
  uint32_t kv_heads, head_dim, ffn, qkv_bias, out_bias;
};

// Whether a block is MiniLLM's (the module decode_layer): nn.MultiheadAttention's heads of D/H
// with q, k, v and o biases, a SiLU MLP of 4D. Else a llama block (decode_layer_llama).
bool minillm_block(const Ops::DecodeLayerArgs& a) {
  const int64_t D = a.qkv->cols;
  return !a.swiglu && a.heads.kv_heads == a.heads.heads && a.heads.q_dim() == D && a.qkv_bias && a.out_bias &&
         a.ffn0->rows == 4 * D;
}

// A block's bindings 4-15 (weights, scales, biases, norms) and 18 (its KV cache rows; V at the
// same offsets) with the bytes per element its Table offset counts in.
struct BlockView {
  BufferView view;
  uint32_t unit;
};
std::vector<BlockView> block_views(const Ops::DecodeLayerArgs& a, const BufferView& none) {
  const auto values = [&](const DeviceMatrix* m) { return m ? m->chunks[0].values : none; };  // biases: optional
  const auto scales = [&](const DeviceMatrix* m) { return m->scales.buffer ? m->scales : none; };
  return {{values(a.qkv), 16},     {values(a.out), 16},     {values(a.ffn0), 16},   {values(a.ffn2), 16},
          {scales(a.qkv), 4},      {scales(a.out), 4},      {scales(a.ffn0), 4},    {scales(a.ffn2), 4},
          {values(a.qkv_bias), 4}, {values(a.out_bias), 4}, {values(a.norm1), 4},   {values(a.norm2), 4},
          {a.cache.k, 4}};
}

bool is_cpu(const DeviceInfo& i) { return i.type == VK_PHYSICAL_DEVICE_TYPE_CPU; }

// "" where the device can run decode_layer.comp at all, else why not.
std::string device_unsupported(const DeviceInfo& info) {
  if (info.subgroup_size < 4) return "subgroups of fewer than 4 invocations";
  if (info.max_storage_buffers < kBindings) return "fewer than 26 storage buffers per shader";
  if (!info.float_atomic_add) return "no float atomic add on storage buffers";
  if (!info.int64_atomics) return "no 64-bit atomics on storage buffers";
  return "";
}

}  // namespace

std::string Ops::decode_layer_unsupported(const DecodeLayerArgs& a) const {
  const DeviceInfo& info = ctx_.info();
  if (std::string why = device_unsupported(info); !why.empty()) return why;
  if (!a.qkv || !a.out || !a.ffn0 || !a.ffn2) return "a block matrix missing";
  const HeadLayout& hs = a.heads;
  const int64_t D = a.qkv->cols;
  if (D <= 0 || D % 4 != 0) return "a width that is not a multiple of 4";
  if (hs.heads <= 0 || hs.kv_heads <= 0 || hs.heads % hs.kv_heads != 0 || static_cast<uint32_t>(hs.heads) > kMaxHeads)
    return "query heads that are not groups of the key/value heads (at most 1024)";
  const bool minillm = minillm_block(a);
  // The MiniLLM module reads the cache and each head's values as vec4s; the llama module any even size.
  if (hs.head_dim <= 0 || hs.head_dim % (minillm ? 4 : 2) != 0 || hs.head_dim > 256)
    return minillm ? "a head dim that is not a multiple of 4 up to 256" : "a head dim that is not even up to 256";
  if (!minillm && !a.swiglu)
    return "a SiLU MLP outside MiniLLM's blocks (heads of dim/heads with q, k, v and o biases, 4·dim wide)";
  const int64_t Q = hs.q_dim(), KV = hs.kv_dim(), F = a.ffn2->cols;
  const struct {
    const DeviceMatrix* m;
    int64_t rows, cols;
  } mats[4] = {{a.qkv, Q + 2 * KV, D}, {a.out, D, Q}, {a.ffn0, a.swiglu ? 2 * F : 4 * D, D}, {a.ffn2, D, F}};
  for (const auto& m : mats) {
    if (m.m->rows != m.rows || m.m->cols != m.cols || m.m->chunks.size() != 1)
      return "a block matrix of another shape or in several chunks";
    if (m.m->dtype != a.qkv->dtype || m.m->group != a.qkv->group || m.m->scale_f16 != a.qkv->scale_f16)
      return "block matrices in different encodings";
    if (m.m->dtype == EdgeDType::int4 && m.m->group % 32 != 0) return "int4 groups that are not a multiple of 32";
    if (minillm && row_bytes(m.m->dtype, m.cols) % 16 != 0) return "weight rows that are not whole 16-byte words";
  }
  for (const DeviceMatrix* v : {a.qkv_bias, a.out_bias, a.norm1, a.norm2})
    if (v && (v->chunks.size() != 1 || (v->dtype != EdgeDType::f32 && v->dtype != EdgeDType::f16)))
      return "a bias or norm weight split or not f32/f16";
  if (!a.norm1 || !a.norm2 || (minillm && (!a.qkv_bias || !a.out_bias))) return "a bias or norm weight missing";
  if ((a.qkv_bias && a.out_bias && a.qkv_bias->dtype != a.out_bias->dtype) || a.norm1->dtype != a.norm2->dtype)
    return "mixed bias or norm encodings";
  if (shared_bytes(block_xs(D, !minillm), 256, layer_loads(a.qkv->dtype, tuning_)) > info.max_shared_bytes)
    return "the staged row exceeds shared memory";
  return "";
}

// decode_layer's pipeline for weights of dtype d, staged rows of up to `xs` floats, workgroups of
// `threads`; multi: several blocks a dispatch (their offsets from the Table), else one at its own
// bindings. Its waits poll with acquire loads except on CPU devices (decode_layer.comp's POLL).
const Kernel& Ops::layer_kernel(EdgeDType d, int64_t xs, uint32_t threads, bool multi, uint32_t loads,
                                uint32_t rows_wanted, bool timeline, uint32_t head, const LlamaModule* llama) {
  // Rows per subgroup: two share each staged x read where decoding costs instructions (int8,
  // int4), one where the GEMV is bound by memory alone (f16, f32); the qkv phase takes rotation
  // pairs. H200, seed size, µs per block: int8 68.4 / 68.5 / 85.0 at 1 / 2 / 4 rows, int4 91.7 /
  // 90.2 / 104.1 (bench/vulkan_notes.md). set_gemv_shape's rows and split override (tests).
  uint32_t rows = d == EdgeDType::int4 || d == EdgeDType::int8 ? 2 : 1;
  if (rows_wanted || gemv_shape_.rows) rows = std::clamp<uint32_t>(rows_wanted ? rows_wanted : gemv_shape_.rows, 1, 4);
  const uint32_t qkv_rows = std::min<uint32_t>(4, std::max<uint32_t>(2, rows + rows % 2));
  loads = std::max({loads, rows, qkv_rows});  // a load a row of each row set at least
  std::vector<uint32_t> spec = {static_cast<uint32_t>(xs), rows,    qkv_rows, threads, shader_wtype(d), loads,
                                multi ? 1u : 0u,           is_cpu(ctx_.info()) ? 0u : 1u, head};
  if (llama) spec.insert(spec.end(), {llama->aligned ? 1u : 0u, llama->hd4 ? 1u : 0u});  // ALIGNED, HD4
  const std::string name = std::string(llama ? "decode_layer_llama" : "decode_layer") + (timeline ? "_timeline" : "");
  return kernels_.get(name, timeline ? kBindings + 1 : kBindings, llama ? sizeof(LlamaPush) : sizeof(LayerPush), {},
                      spec);
}

void Ops::dispatch_layers(Recorder& r, const DecodeLayerArgs* first, uint32_t count, const BufferView& table,
                          uint32_t first_row, LayerGrid grid, bool probe, const Embedding* embed) {
  PYLON_ASSERT(count > 0 && first_row + count < 4096, "decode_layers: blocks ", first_row, "..", first_row + count,
               " (at most 4095: decode_layer.comp's qk_tag)");
  for (uint32_t b = 0; b < count; ++b) {
    const std::string why = decode_layer_unsupported(first[b]);
    PYLON_ASSERT(why.empty(), "decode_layer: ", why);
  }
  PYLON_ASSERT(grid.groups > 0 && (grid.threads == 256 || grid.threads == 512 || grid.threads == 1024),
               "decode_layer: ", grid.groups, " workgroups of ", grid.threads);
  const DecodeLayerArgs& a = first[0];
  const bool timeline = timeline_blocks_ > 0 && !probe;
  PYLON_CHECK(!timeline || (first_row + count <= timeline_blocks_ && grid.groups == timeline_groups_),
              "decode_layer: blocks ", first_row, "..", first_row + count, " on ", grid.groups,
              " workgroups do not fit the timeline of ", timeline_blocks_, " blocks on ", timeline_groups_);
  const uint32_t D = static_cast<uint32_t>(a.qkv->cols);
  // A llama block: rows read at byte offsets unless every matrix's are whole 16-byte words, the
  // cache by element unless the head dim is a multiple of 4 (decode_layer.comp's ALIGNED, HD4).
  const bool llama = !minillm_block(a);
  bool aligned = true;
  for (const DeviceMatrix* m : {a.qkv, a.out, a.ffn0, a.ffn2})
    aligned = aligned && row_bytes(m->dtype, m->cols) % 16 == 0;
  const LlamaModule module{aligned, a.heads.head_dim % 4 == 0};
  const Kernel& k = layer_kernel(a.qkv->dtype, block_xs(D, llama), grid.threads, count > 1,
                                 layer_loads(a.qkv->dtype, tuning_), 0, timeline, 0, llama ? &module : nullptr);
  const DeviceMatrix* bias = a.qkv_bias ? a.qkv_bias : a.out_bias;  // their encoding (one, where both)
  LlamaPush lp{};
  LayerPush& p = lp.base;
  p.dim = D;
  p.heads = static_cast<uint32_t>(a.heads.heads);
  p.max_keys = a.max_keys;
  p.group = static_cast<uint32_t>(std::max(a.qkv->group, 1));
  p.scale_f16 = a.qkv->scale_f16 ? 1 : 0;
  p.bias_f16 = bias && bias->dtype == EdgeDType::f16 ? 1 : 0;
  p.norm_f16 = a.norm1->dtype == EdgeDType::f16 ? 1 : 0;
  p.eps = a.eps;
  p.attn_scale = 1.0f / std::sqrt(static_cast<float>(a.heads.head_dim));
  lp.kv_heads = static_cast<uint32_t>(a.heads.kv_heads);
  lp.head_dim = static_cast<uint32_t>(a.heads.head_dim);
  lp.ffn = static_cast<uint32_t>(a.ffn2->cols);
  lp.qkv_bias = a.qkv_bias ? 1 : 0;
  lp.out_bias = a.out_bias ? 1 : 0;
  // Reads of the barrier count before a workgroup gives up: a GPU's read takes ~1 µs, a CPU
  // device's a few ns, and its workgroups share a few threads with the rest of the machine. The
  // probe gives up sooner: a grid that is not resident fails it at once.
  p.spin_limit = is_cpu(ctx_.info()) ? (probe ? 1u << 22 : 1u << 28) : (probe ? 1u << 14 : 1u << 22);
  if (!probe && fail_barriers_) p.spin_limit = 0;  // tests: every barrier gives up
  p.probe = probe ? 1 : 0;
  p.split = gemv_shape_.split;  // 0 unless forced (tests): a power of two
  p.chunk = attention_chunk_;
  p.blocks = count;
  p.first_row = first_row;
  p.embed = embed ? (embed->table->dtype == EdgeDType::f16 ? 2 : 1) : 0;
  // Each block binding over the run's blocks from the lowest offset on (Table: the rest).
  const BufferView none{&dummy_, 0, 0};
  std::vector<BlockView> bound = block_views(a, none);
  for (uint32_t b = 1; b < count; ++b) {
    const std::vector<BlockView> v = block_views(first[b], none);
    for (size_t i = 0; i < bound.size(); ++i) bound[i].view.offset = std::min(bound[i].view.offset, v[i].view.offset);
  }
  for (BlockView& v : bound) v.view.size = 0;  // to the end of the buffer
  // V bound where K is, relative to block 0's (plan_layers joins blocks whose V offsets follow K's).
  const BufferView v_cache{a.cache.v.buffer, a.cache.v.offset - (a.cache.k.offset - bound[12].view.offset), 0};
  r.label_next(std::string("decode_layer ") + edge_dtype_name(a.qkv->dtype));
  std::vector<BufferView> views = {
      a.x, none, none, none, bound[0].view, bound[1].view, bound[2].view, bound[3].view, bound[4].view,
      bound[5].view, bound[6].view, bound[7].view, bound[8].view, bound[9].view, bound[10].view,
      bound[11].view, a.table, a.position, bound[12].view, v_cache, a.partials, {&sync_, 0, 0},
      {&failed_, 0, 0}, table, embed ? embed->table->chunks[0].values : none, embed ? embed->tokens : none};
  if (timeline) views.push_back({&timeline_, 0, 0});
  if (llama)
    r.dispatch(k, views, lp, grid.groups);
  else
    r.dispatch(k, views, p, grid.groups);
}

Ops::LayerRuns Ops::plan_layers(const std::vector<DecodeLayerArgs>& blocks, uint32_t max_blocks) {
  LayerRuns runs;
  const BufferView none{&dummy_, 0, 0};
  std::vector<std::vector<BlockView>> views;
  for (const DecodeLayerArgs& a : blocks) views.push_back(block_views(a, none));
  // A block joins the run before it where every binding is in the same buffer (and the K and V
  // caches' offsets agree) and the run is not full.
  const auto joins = [&](size_t b) {
    if (runs.starts.empty() || (max_blocks && b - runs.starts.back() >= max_blocks)) return false;
    const DecodeLayerArgs &x = blocks[runs.starts.back()], &y = blocks[b];
    if (x.cache.v.buffer != y.cache.v.buffer || y.cache.v.offset - x.cache.v.offset != y.cache.k.offset - x.cache.k.offset)
      return false;
    for (size_t i = 0; i < views[b].size(); ++i)
      if (views[b][i].view.buffer != views[runs.starts.back()][i].view.buffer) return false;
    return true;
  };
  for (size_t b = 0; b < blocks.size(); ++b)
    if (!joins(b)) runs.starts.push_back(static_cast<uint32_t>(b));
  // Table rows: each binding's offset from its run's lowest, in the binding's elements.
  std::vector<uint32_t> table(std::max<size_t>(blocks.size(), 1) * kTableWords, 0);
  for (size_t run = 0; run < runs.starts.size(); ++run) {
    const size_t begin = runs.starts[run], end = run + 1 < runs.starts.size() ? runs.starts[run + 1] : blocks.size();
    for (size_t i = 0; i < views[begin].size(); ++i) {
      VkDeviceSize base = views[begin][i].view.offset;
      for (size_t b = begin; b < end; ++b) base = std::min(base, views[b][i].view.offset);
      for (size_t b = begin; b < end; ++b) {
        const VkDeviceSize delta = views[b][i].view.offset - base;
        PYLON_ASSERT(delta % views[b][i].unit == 0 && delta / views[b][i].unit <= UINT32_MAX,
                     "decode_layers: a block tensor's offset ", delta, " is not a whole element");
        table[b * kTableWords + i] = static_cast<uint32_t>(delta / views[b][i].unit);
      }
    }
  }
  runs.table = ctx_.make_buffer(table.size() * 4, MemoryKind::device);
  ctx_.upload(runs.table, 0, table.data(), table.size() * 4);
  return runs;
}

bool Ops::layer_embeds(const DeviceMatrix& table, int64_t dim) const {
  return table.chunks.size() == 1 && table.cols == dim && (table.dtype == EdgeDType::f32 || table.dtype == EdgeDType::f16);
}

void Ops::decode_layers(Recorder& r, const std::vector<DecodeLayerArgs>& blocks, const LayerRuns& runs,
                        LayerGrid grid, const Embedding* embed) {
  PYLON_ASSERT(!embed || layer_embeds(*embed->table, blocks.at(0).qkv->cols), "decode_layers: an embedding it cannot read");
  for (size_t run = 0; run < runs.starts.size(); ++run) {
    const uint32_t begin = runs.starts[run];
    const uint32_t end = run + 1 < runs.starts.size() ? runs.starts[run + 1] : static_cast<uint32_t>(blocks.size());
    dispatch_layers(r, &blocks[begin], end - begin, {&runs.table, 0, 0}, begin, grid, false, run == 0 ? embed : nullptr);
  }
}

std::string Ops::decode_head_unsupported(const DeviceMatrix& w, const DeviceMatrix* norm) const {
  const DeviceInfo& info = ctx_.info();
  if (std::string why = device_unsupported(info); !why.empty()) return why;
  if (w.chunks.size() != 1) return "a head in several chunks";
  if (w.cols % 4 != 0 || row_bytes(w.dtype, w.cols) % 16 != 0 || (w.dtype == EdgeDType::int4 && w.group % 32 != 0))
    return "head rows that are not whole 16-byte words";
  if (norm && (norm->cols != w.cols || norm->chunks.size() != 1 ||
               (norm->dtype != EdgeDType::f32 && norm->dtype != EdgeDType::f16)))
    return "a final norm of another width, split or not f32/f16";
  if (shared_bytes(w.cols, 256, head_loads(w.dtype, tuning_)) > info.max_shared_bytes) return "a row of dim floats exceeds shared memory";
  return "";
}

void Ops::decode_head(Recorder& r, const BufferView& y, const BufferView& x, const DeviceMatrix& w, LayerGrid grid,
                      const DeviceMatrix* norm, float eps) {
  const std::string why = decode_head_unsupported(w, norm);
  PYLON_ASSERT(why.empty(), "decode_head: ", why);
  PYLON_ASSERT(grid.groups > 0 && (grid.threads == 256 || grid.threads == 512 || grid.threads == 1024),
               "decode_head: ", grid.groups, " workgroups of ", grid.threads);
  // Its staged row is D floats, not the block's 4D, so several workgroups fit an SM; with no
  // barrier they need not all be resident. H200, seed size head (32000 x 2048), µs at 1 / 4
  // workgroups per SM of the block's grid (gemv_subgroup's in the same call): f16 52.5-54.5 /
  // 51.5-51.6 (50-55), int8 35.8-36.0 / 42.7-43.0 (48-52), int4 64.1-64.7 / 59.2-60.7 (59-60)
  // (bench/vulkan_notes.md, 20:11-20:14 UTC).
  // Rows per subgroup: int4's head takes one (H200, µs: 48.9 at one, 60.4-61.3 at the blocks' two,
  // 65.7 at four; bench/vulkan_notes.md), the others the blocks' choice; set_gemv_shape's rows
  // (tests) and DecodeTuning::head_rows (benchmarks) override it.
  uint32_t rows = tuning_.head_rows;
  if (!rows && !gemv_shape_.rows && w.dtype == EdgeDType::int4) rows = 1;
  PYLON_CHECK(shared_bytes(w.cols, grid.threads, head_loads(w.dtype, tuning_)) <= ctx_.info().max_shared_bytes,
              "Vulkan: decode_head's shared memory at ", grid.threads, " threads and ", head_loads(w.dtype, tuning_),
              " words in flight exceeds the device's ", ctx_.info().max_shared_bytes, " bytes");
  // Behind a final norm: the llama module's head (HEAD 2), which stages x·norm (rows of whole words).
  const LlamaModule module{true, true};
  const Kernel& k = layer_kernel(w.dtype, w.cols, grid.threads, false, head_loads(w.dtype, tuning_), rows, false,
                                 norm ? 2 : 1, norm ? &module : nullptr);
  // DecodeTuning::head_groups: that many workgroups per SM instead (benchmarks).
  const uint32_t groups = (tuning_.head_groups ? tuning_.head_groups : w.dtype == EdgeDType::int8 ? 1 : 4) * grid.groups;
  LlamaPush lp{};
  LayerPush& p = lp.base;
  p.dim = static_cast<uint32_t>(w.cols);
  p.heads = 1;
  p.group = static_cast<uint32_t>(std::max(w.group, 1));
  p.scale_f16 = w.scale_f16 ? 1 : 0;
  p.head_rows = static_cast<uint32_t>(w.rows);
  p.norm_f16 = norm && norm->dtype == EdgeDType::f16 ? 1 : 0;
  p.eps = eps;
  lp.kv_heads = 1;
  const BufferView none{&dummy_, 0, 0};
  r.label_next(std::string("decode_head ") + edge_dtype_name(w.dtype));
  // Bound: x (0), y (1: the qkv binding), the matrix (4), its scales (8) and the final norm's
  // weights (14: G1); the rest unused.
  p.blocks = 1;
  const std::vector<BufferView> views = {
      x,    y,    none, none, w.chunks[0].values, none, none, none, w.scales.buffer ? w.scales : none, none, none,
      none, none, none, norm ? norm->chunks[0].values : none, none, none, none, none, none, none, none, none,
      {&zero_, 0, 64}, none, none};
  if (norm)
    r.dispatch(k, views, lp, groups);
  else
    r.dispatch(k, views, p, groups);
}

// A CPU device (llvmpipe) runs a workgroup per thread, shared with everything else on the machine,
// and ends any shader loop after 65535 iterations, so a barrier's wait there lasts about a
// millisecond: a grid of several workgroups passes the probe but gives up mid-token whenever
// another workgroup's thread is busy. So one workgroup there (its barriers never wait).
Ops::LayerGrid Ops::persistent_grid(const DecodeLayerArgs& a, LayerGrid want) {
  if (!decode_layer_unsupported(a).empty()) return {};
  std::vector<LayerGrid> candidates;
  const uint32_t units = ctx_.info().compute_units;
  if (want.groups) candidates = {{want.groups, want.threads ? want.threads : 256}};
  else if (units) candidates = {{units, 512}, {units, 1024}, {units, 256}};
  else if (is_cpu(ctx_.info())) candidates = {{1, 256}};  // (above)
  else candidates = {{32, 256}, {16, 256}, {8, 256}, {4, 256}, {2, 256}, {1, 256}};
  for (const LayerGrid& g : candidates) {
    if (shared_bytes(block_xs(a.qkv->cols, !minillm_block(a)), g.threads, layer_loads(a.qkv->dtype, tuning_)) >
        ctx_.info().max_shared_bytes)
      continue;
    Recorder r(ctx_);
    dispatch_layers(r, &a, 1, {&zero_, 0, 64}, 0, g, true, nullptr);
    r.run();
    if (!persistent_failed()) return g;
  }
  return {};
}

void Ops::enable_timeline(uint32_t blocks, uint32_t groups) {
  PYLON_CHECK(ctx_.info().shader_clock, "Vulkan: the decode timeline needs a shader clock (VK_KHR_shader_clock), ",
              "which ", ctx_.info().name, " lacks");
  PYLON_CHECK(ctx_.info().max_storage_buffers > kBindings, "Vulkan: the decode timeline needs ", kBindings + 1,
              " storage buffers per shader");
  PYLON_CHECK(blocks > 0 && groups > 0, "Vulkan: a decode timeline of no blocks or workgroups");
  timeline_ = ctx_.make_buffer((2ull + uint64_t{blocks} * LayerTimeline::kEvents) * groups * 4, MemoryKind::host);
  timeline_blocks_ = blocks, timeline_groups_ = groups;
}

LayerTimeline Ops::read_timeline() {
  LayerTimeline t;
  t.groups = timeline_groups_, t.blocks = timeline_blocks_;
  t.words.resize((2ull + uint64_t{t.blocks} * LayerTimeline::kEvents) * t.groups);
  if (!t.words.empty()) ctx_.download(timeline_, 0, t.words.data(), t.words.size() * 4);
  return t;
}

bool Ops::persistent_failed() {
  uint32_t flag = 0;
  ctx_.download(failed_, 0, &flag, 4);
  if (!flag) return false;
  const std::vector<uint32_t> zeros(16 + kMaxHeads, 0);
  ctx_.upload(failed_, 0, zeros.data(), 16);
  ctx_.upload(sync_, 0, zeros.data(), zeros.size() * 4);
  return true;
}

}  // namespace pylon::vk
